// Cutting a gather into lane chunks (see lane_chunks.hpp).
#include "io/lane_chunks.hpp"

#include <algorithm>

namespace ferry::detail {

std::vector<lane_chunk> cut_into_chunks(const std::vector<gather>& extents, std::size_t capacity) {
    std::vector<lane_chunk> out;
    lane_chunk cur{0, 0, nullptr, {}, {}};
    std::size_t pos = 0;  // bytes of buffer laid out so far, over all chunks
    auto flush = [&] {
        if (cur.len == 0) return;
        cur.pos = pos;
        pos += cur.len;
        out.push_back(std::move(cur));
        cur = lane_chunk{0, 0, nullptr, {}, {}};
    };
    auto room = [&] { return capacity - cur.len; };
    auto add_read = [&](file_impl* f, std::uint64_t offset, std::size_t len) {
        if (!cur.reads.empty()) {
            lane_read& last = cur.reads.back();
            if (last.rows == 1 && last.file == f && last.offset + last.len == offset && last.at + last.len == cur.len) {
                last.len += len;
                return;
            }
        }
        cur.reads.push_back({f, offset, len, cur.len});
    };
    auto add_copy = [&](char* dst, std::size_t width, std::size_t rows, std::size_t pitch) {
        if (rows == 1 && !cur.copies.empty()) {
            lane_copy& last = cur.copies.back();
            if (last.rows == 1 && last.at + last.width == cur.len && last.dst + last.width == dst) {
                last.width += width;
                return;
            }
        }
        cur.copies.push_back({cur.len, dst, width, rows, pitch});
    };
    for (const gather& g : extents) {
        if (g.rows == 0 || g.width == 0) continue;
        file_impl* f = g.file.get();
        char* dst = static_cast<char*>(g.memory);
        const bool span = g.span && g.rows > 1 && g.pitch > g.width && g.pitch <= capacity / 2;
        if (span) {
            for (std::uint64_t r = 0; r < g.rows;) {
                // As many rows as the chunk has room for: (n - 1) * pitch + width bytes.
                std::uint64_t n = room() >= g.width ? 1 + (room() - g.width) / g.pitch : 0;
                if (n == 0) {
                    flush();
                    continue;
                }
                n = std::min<std::uint64_t>(n, g.rows - r);
                std::size_t bytes = static_cast<std::size_t>((n - 1) * g.pitch + g.width);
                add_read(f, g.offset + r * g.pitch, bytes);
                add_copy(dst + r * g.width, static_cast<std::size_t>(g.width), static_cast<std::size_t>(n),
                         static_cast<std::size_t>(g.pitch));
                cur.len += bytes;
                r += n;
            }
            continue;
        }
        for (std::uint64_t r = 0; r < g.rows; ++r) {
            if (g.rows > 1 && g.width <= room()) {
                // Every whole row the chunk has room for, as one strided read; they land packed,
                // so one plain copy.
                std::uint64_t n = std::min<std::uint64_t>(g.rows - r, room() / g.width);
                std::size_t bytes = static_cast<std::size_t>(n * g.width);
                if (n == 1) {
                    add_read(f, g.offset + r * g.pitch, bytes);
                } else {
                    cur.reads.push_back({f, g.offset + r * g.pitch, static_cast<std::size_t>(g.width), cur.len,
                                         static_cast<std::size_t>(n), g.pitch});
                }
                add_copy(dst + r * g.width, bytes, 1, bytes);
                cur.len += bytes;
                r += n - 1;
                continue;
            }
            std::uint64_t row_at = g.offset + r * g.pitch;
            for (std::uint64_t k = 0; k < g.width;) {
                if (room() == 0) flush();
                std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(room(), g.width - k));
                add_read(f, row_at + k, len);
                add_copy(dst + r * g.width + k, len, 1, len);
                cur.len += len;
                k += len;
            }
        }
    }
    flush();
    return out;
}

}  // namespace ferry::detail
