#include "formats/npy_header.hpp"

#include <cctype>
#include <cstring>
#include <limits>
#include <optional>

#include "escape_text.hpp"
#include "ferry/error.hpp"

namespace ferry::formats {
namespace {

constexpr std::string_view magic{"\x93NUMPY", 6};
// numpy itself refuses more than 64 dimensions.
constexpr std::size_t max_dims = 64;

// A recursive-descent reader for the one shape of Python literal a .npy header may hold:
// {'descr': STRING, 'fortran_order': BOOL, 'shape': TUPLE-OF-INTS} in any key order, with
// optional trailing commas and whitespace. Anything else is an error, never evaluated.
class header_parser {
public:
    header_parser(std::string_view text, const std::string& file) : s_(text), file_(file) {}

    void parse(npy_info& info) {
        skip_ws();
        expect('{', "header", "expected '{' at the start of the dict");
        bool have_descr = false, have_fortran = false, have_shape = false;
        skip_ws();
        while (!peek('}')) {
            std::string key = parse_string("header");
            skip_ws();
            expect(':', "header", "expected ':' after key '" + printable(key) + "'");
            skip_ws();
            if (key == "descr") {
                if (have_descr) fail("descr", "duplicate key");
                have_descr = true;
                parse_descr(info);
            } else if (key == "fortran_order") {
                if (have_fortran) fail("fortran_order", "duplicate key");
                have_fortran = true;
                info.layout = parse_bool() ? storage_order::fortran : storage_order::c;
            } else if (key == "shape") {
                if (have_shape) fail("shape", "duplicate key");
                have_shape = true;
                info.shape = parse_shape();
            } else {
                fail("header", "unexpected key '" + printable(key) +
                                   "' (expected exactly descr, fortran_order, shape)");
            }
            skip_ws();
            if (peek(',')) {
                ++pos_;
                skip_ws();
            } else if (!peek('}')) {
                fail("header", "expected ',' or '}' after the value of '" + printable(key) + "'");
            }
        }
        ++pos_;
        skip_ws();
        if (pos_ != s_.size()) fail("header", "unexpected text after the dict");
        if (!have_descr) fail("descr", "missing key");
        if (!have_fortran) fail("fortran_order", "missing key");
        if (!have_shape) fail("shape", "missing key");
    }

private:
    [[noreturn]] void fail(const std::string& field, const std::string& reason) const {
        throw format_error(file_, field, reason);
    }

    static std::string printable(std::string_view text) { return detail::escape_text(text, 40); }

    bool peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }

    void expect(char c, const std::string& field, const std::string& reason) {
        if (!peek(c)) fail(field, reason);
        ++pos_;
    }

    void skip_ws() {
        while (pos_ < s_.size() &&
               (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
            ++pos_;
    }

    std::string parse_string(const std::string& field) {
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"'))
            fail(field, "expected a quoted string");
        char quote = s_[pos_++];
        std::size_t start = pos_;
        while (pos_ < s_.size() && s_[pos_] != quote) {
            if (s_[pos_] == '\\') fail(field, "escape sequences are not supported in strings");
            if (s_[pos_] == '\n') fail(field, "unterminated string");
            ++pos_;
        }
        if (pos_ >= s_.size()) fail(field, "unterminated string");
        std::string out(s_.substr(start, pos_ - start));
        ++pos_;
        return out;
    }

    void parse_descr(npy_info& info) {
        if (peek('[')) fail("descr", "structured dtypes are not supported");
        if (!peek('\'') && !peek('"')) fail("descr", "not a string");
        std::string d = parse_string("descr");
        std::string_view body = d;
        if (!body.empty() && (body[0] == '<' || body[0] == '>' || body[0] == '|' || body[0] == '='))
            body.remove_prefix(1);
        if (!body.empty() && body[0] == 'O')
            fail("descr", "object dtype '" + printable(d) + "' refused (it would need pickle)");
        auto t = parse_numpy_descr(d);
        if (!t) fail("descr", "unsupported dtype '" + printable(d) + "'");
        info.type = *t;
    }

    bool parse_bool() {
        if (s_.substr(pos_, 4) == "True") {
            pos_ += 4;
            return true;
        }
        if (s_.substr(pos_, 5) == "False") {
            pos_ += 5;
            return false;
        }
        fail("fortran_order", "not True or False");
    }

    std::int64_t parse_dim() {
        if (peek('-')) fail("shape", "negative dimension");
        std::size_t start = pos_;
        std::uint64_t v = 0;
        while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
            auto digit = static_cast<std::uint64_t>(s_[pos_] - '0');
            if (v > (static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - digit) / 10)
                fail("shape", "dimension too large");
            v = v * 10 + digit;
            ++pos_;
        }
        if (pos_ == start) fail("shape", "expected an integer dimension");
        if (pos_ - start > 1 && s_[start] == '0') fail("shape", "dimension with a leading zero");
        if (pos_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' || s_[pos_] == '_'))
            fail("shape", "dimension is not a plain integer");
        return static_cast<std::int64_t>(v);
    }

    std::vector<std::int64_t> parse_shape() {
        if (!peek('(')) fail("shape", "not a tuple");
        ++pos_;
        std::vector<std::int64_t> dims;
        bool trailing_comma = false;
        skip_ws();
        while (!peek(')')) {
            if (pos_ >= s_.size()) fail("shape", "unterminated tuple");
            dims.push_back(parse_dim());
            if (dims.size() > max_dims) fail("shape", "more than 64 dimensions");
            skip_ws();
            trailing_comma = false;
            if (peek(',')) {
                ++pos_;
                trailing_comma = true;
                skip_ws();
            } else if (!peek(')')) {
                fail("shape", "expected ',' or ')' in the tuple");
            }
        }
        ++pos_;
        // In Python "(3)" is the integer 3, not a tuple.
        if (dims.size() == 1 && !trailing_comma) fail("shape", "not a tuple: '(n)' needs a comma");
        return dims;
    }

    std::string_view s_;
    const std::string& file_;
    std::size_t pos_ = 0;
};

std::uint32_t read_le(std::string_view b, std::size_t at, std::size_t n) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < n; ++i)
        v |= static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
    return v;
}

}  // namespace

npy_preamble parse_npy_preamble(std::string_view bytes, const std::string& file) {
    if (bytes.size() < magic.size() || bytes.substr(0, magic.size()) != magic)
        throw format_error(file, "magic", "not a .npy file (no \\x93NUMPY magic)");
    if (bytes.size() < 8) throw format_error(file, "version", "file ends inside the preamble");
    npy_preamble p;
    p.major = static_cast<unsigned char>(bytes[6]);
    p.minor = static_cast<unsigned char>(bytes[7]);
    if (!((p.major == 1 || p.major == 2 || p.major == 3) && p.minor == 0))
        throw format_error(file, "version",
                           "unknown version " + std::to_string(p.major) + "." +
                               std::to_string(p.minor) + " (known: 1.0, 2.0, 3.0)");
    std::size_t len_bytes = p.major == 1 ? 2 : 4;
    p.size = 8 + len_bytes;
    if (bytes.size() < p.size)
        throw format_error(file, "header_length", "file ends inside the preamble");
    p.header_size = read_le(bytes, 8, len_bytes);
    if (p.header_size > npy_max_header_size)
        throw format_error(file, "header_length",
                           "header of " + std::to_string(p.header_size) +
                               " bytes exceeds the cap of " + std::to_string(npy_max_header_size));
    return p;
}

npy_info parse_npy_header(std::string_view header, const npy_preamble& pre,
                          const std::string& file) {
    npy_info info;
    info.major = pre.major;
    info.minor = pre.minor;
    info.header_size = pre.header_size;
    info.data_offset = pre.size + pre.header_size;
    if (pre.major < 3) {
        // Versions 1 and 2 are latin-1, and every valid header is plain ASCII.
        for (char c : header)
            if (static_cast<unsigned char>(c) >= 0x80)
                throw format_error(file, "header", "non-ASCII byte in a version 1/2 header");
    }
    for (char c : header)
        if (c == '\0') throw format_error(file, "header", "NUL byte in the header");
    header_parser(header, file).parse(info);
    std::size_t count = 1;
    std::size_t itemsize = size_of(info.type.type);
    bool zero = false;
    for (std::int64_t d : info.shape) {
        auto u = static_cast<std::uint64_t>(d);
        if (u == 0) {
            zero = true;
            continue;
        }
        if (count > std::numeric_limits<std::uint64_t>::max() / itemsize / u)
            throw format_error(file, "shape", "array size overflows 64 bits");
        count *= u;
    }
    info.data_bytes = zero ? 0 : count * itemsize;
    return info;
}

std::string format_npy_header(const typed_order& type, const std::vector<std::int64_t>& shape,
                              storage_order layout) {
    const bool fortran = layout == storage_order::fortran;
    std::string dict = "{'descr': '" + numpy_descr(type.type, type.order) + "', 'fortran_order': " +
                       (fortran ? "True" : "False") + ", 'shape': " + shape_to_string(shape) + ", }";
    // numpy leaves room for the growth axis (the first in C order, the last in Fortran order)
    // to grow to 21 digits without rewriting the file.
    if (!shape.empty()) {
        std::size_t digits = std::to_string(fortran ? shape.back() : shape[0]).size();
        if (digits < 21) dict.append(21 - digits, ' ');
    }
    std::size_t hlen = dict.size() + 1;  // the closing newline
    int major = 1;
    std::size_t pre = 10;
    std::size_t pad = 64 - (pre + hlen) % 64;
    if (hlen + pad > 0xffff) {
        major = 2;
        pre = 12;
        pad = 64 - (pre + hlen) % 64;
    }
    std::size_t stored = hlen + pad;
    std::string out(magic);
    out += static_cast<char>(major);
    out += '\0';
    for (std::size_t i = 0; i < pre - 8; ++i) out += static_cast<char>((stored >> (8 * i)) & 0xff);
    out += dict;
    out.append(pad, ' ');
    out += '\n';
    return out;
}

}  // namespace ferry::formats
