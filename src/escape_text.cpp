#include "escape_text.hpp"

#include <cstdint>

namespace ferry::detail {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] (2-4), or 0 (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
    auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
    auto cont = [&](std::size_t k) { return i + k < s.size() && (b(k) & 0xc0) == 0x80; };
    unsigned char c = b(0);
    if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        if (!cont(1) || !cont(2)) return 0;
        if (c == 0xe0 && b(1) < 0xa0) return 0;   // overlong
        if (c == 0xed && b(1) >= 0xa0) return 0;  // surrogate
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (!cont(1) || !cont(2) || !cont(3)) return 0;
        if (c == 0xf0 && b(1) < 0x90) return 0;   // overlong
        if (c == 0xf4 && b(1) >= 0x90) return 0;  // above U+10FFFF
        return 4;
    }
    return 0;
}

void hex(std::string& out, unsigned char c) {
    static const char digits[] = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
}

}  // namespace

bool is_utf8(std::string_view text) {
    for (std::size_t i = 0; i < text.size();) {
        if (static_cast<unsigned char>(text[i]) < 0x80) {
            ++i;
        } else if (std::size_t n = utf8_sequence(text, i); n > 0) {
            i += n;
        } else {
            return false;
        }
    }
    return true;
}

std::string escape_text(std::string_view text, std::size_t limit) {
    const bool cut = text.size() > limit;
    if (cut) text = text.substr(0, limit);
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
        auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
            ++i;
        } else if (c == '\n') {
            out += "\\n", ++i;
        } else if (c == '\r') {
            out += "\\r", ++i;
        } else if (c == '\t') {
            out += "\\t", ++i;
        } else if (std::size_t n = c >= 0x80 ? utf8_sequence(text, i) : 0; n > 0) {
            // C1 controls (U+0080-U+009F) are valid UTF-8 but not printable.
            if (n == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0) {
                hex(out, c);
                hex(out, static_cast<unsigned char>(text[i + 1]));
            } else {
                out.append(text.substr(i, n));
            }
            i += n;
        } else {
            hex(out, c);
            ++i;
        }
    }
    if (cut) out += "...";
    return out;
}

}  // namespace ferry::detail
