// A program outside the source tree that uses installed ferry: writes a file and reads it back.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    std::vector<char> out(3 << 20), in(3 << 20);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 7);
    {
        ferry::file f(argv[1], ferry::open_mode::write);
        f.write(out.data(), out.size(), 0);
    }
    ferry::file f(argv[1]);
    f.read(in.data(), in.size(), 0);
    if (std::memcmp(in.data(), out.data(), out.size()) != 0) return 1;
    try {
        f.read(in.data(), 1, out.size());
        return 1;
    } catch (const ferry::end_of_file_error&) {
    }
    std::printf("ferry %s: %llu bytes read on the %s route\n", ferry::version(),
                static_cast<unsigned long long>(f.stats().bytes_read()), std::string(ferry::to_string(ferry::io_path::host)).c_str());
    return 0;
}
