// Fields of S3's and STS's XML answers (see xml_field.hpp).
#include "backend/http/xml_field.hpp"

#include <cstdlib>

namespace ferry::detail {
namespace {

void append_utf8(std::string& out, unsigned long cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

}  // namespace

std::string xml_text(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '&') {
            out += s[i];
            continue;
        }
        auto semi = s.find(';', i);
        if (semi == std::string_view::npos) {
            out += s.substr(i);
            break;
        }
        std::string e(s.substr(i + 1, semi - i - 1));
        if (e == "amp") out += '&';
        else if (e == "lt") out += '<';
        else if (e == "gt") out += '>';
        else if (e == "quot") out += '"';
        else if (e == "apos") out += '\'';
        else if (!e.empty() && e[0] == '#')
            append_utf8(out, e.size() > 1 && (e[1] == 'x' || e[1] == 'X') ? std::strtoul(e.c_str() + 2, nullptr, 16)
                                                                         : std::strtoul(e.c_str() + 1, nullptr, 10));
        else
            out += s.substr(i, semi - i + 1);
        i = semi;
    }
    return out;
}

std::string xml_field(std::string_view body, std::string_view tag, std::size_t from, std::size_t to) {
    const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
    auto a = body.find(open, from);
    if (a == std::string_view::npos || a >= to) return {};
    a += open.size();
    auto b = body.find(close, a);
    if (b == std::string_view::npos || b > to) return {};
    return xml_text(body.substr(a, b - a));
}

}  // namespace ferry::detail
