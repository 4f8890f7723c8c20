// ferry convert IN OUT: between raw, .npy and safetensors. The arrays go through GPU memory when
// there is a GPU (byte order, dtype and layout are converted there), else host memory.
#include <cstdio>
#include <filesystem>

#include "cli_util.hpp"
#include "commands.hpp"
#include "ferry/error.hpp"
#include "ferry/formats.hpp"
#include "ferry/memory.hpp"

namespace ferry::cli {
namespace {

struct convert_args {
    std::string in;
    std::string out;
    std::string device;
    std::string from;
    std::string to;
    std::string as;
    std::string dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t offset = 0;
    std::int64_t count = -1;
    std::vector<std::string> tensors;
    std::string name;
    bool keep_byte_order = false;
    bool quiet = false;
    bool no_checksums = false;
};

int run_convert(const convert_args& a) {
    any_load_options o;
    o.load.where = a.device.empty()
                       ? (cuda_device_count() > 0 ? placement::cuda(0) : placement::host())
                       : parse_placement(a.device);
    if (!a.as.empty()) o.load.as = parse_dtype(a.as, "--as").type;
    o.load.keep_byte_order = a.keep_byte_order;
    if (!a.from.empty()) o.format = parse_file_format(a.from);
    if (!a.dtype.empty()) o.raw_type = parse_dtype(a.dtype, "--dtype");
    o.shape = a.shape;
    o.offset = a.offset;
    o.count = a.count;
    o.tensors = a.tensors;
    file_format out_format = a.to.empty() ? format_from_extension(a.out) : parse_file_format(a.to);

    if (out_format != file_format::safetensors && a.tensors.size() > 1)
        throw usage_error("--tensor selected " + std::to_string(a.tensors.size()) + " tensors of " + a.in +
                          "; a " + std::string(to_string(out_format)) + " file holds one: give --tensor once");
    loaded_file lf = load_any(a.in, o);
    std::vector<named_array> arrays = std::move(lf.arrays);
    std::map<std::string, std::string> metadata;
    bool named_by_stem = false;
    if (out_format == file_format::safetensors) {
        metadata = lf.metadata;
        // A .npy or raw array needs a tensor name in safetensors.
        std::string name = a.name.empty() ? std::filesystem::path(a.in).stem().string() : a.name;
        for (auto& na : arrays) {
            if (!na.name.empty()) continue;
            na.name = name;
            named_by_stem = a.name.empty();
        }
    } else if (arrays.size() != 1) {
        throw usage_error(a.in + " holds " + std::to_string(arrays.size()) + " tensors; a " +
                          std::string(to_string(out_format)) +
                          " file holds one: choose it with --tensor NAME");
    }
    try {
        save_any(a.out, out_format, arrays, metadata, !a.no_checksums);
    } catch (const format_error& e) {
        // A file name is any bytes, a safetensors name UTF-8 text: the fix is --name.
        if (!named_by_stem || e.field() != "tensor name") throw;
        throw usage_error(std::string(e.what()) + "; the name comes from the input's file name: give one with --name NAME");
    }
    if (!a.quiet) {
        std::printf("%s (%s) -> %s (%s): %zu array%s, %s via %s\n", a.in.c_str(),
                    std::string(to_string(lf.format)).c_str(), a.out.c_str(),
                    std::string(to_string(out_format)).c_str(), arrays.size(),
                    arrays.size() == 1 ? "" : "s", human_bytes(lf.payload_bytes).c_str(),
                    to_string(o.load.where).c_str());
    }
    return exit_ok;
}

}  // namespace

void add_convert_command(CLI::App& app) {
    auto a = std::make_shared<convert_args>();
    CLI::App* c = app.add_subcommand("convert", "Convert between raw, .npy and safetensors files");
    c->add_option("in", a->in, "The input file")->required();
    c->add_option("out", a->out, "The output file (replaced atomically)")->required();
    c->add_option("--from", a->from, "input format: npy, safetensors or raw (default: from the content)");
    c->add_option("--to", a->to, "output format (default: from the extension: .npy, .safetensors, else raw)");
    c->add_option("--device", a->device, "where the arrays pass through: " + std::string(device_help));
    c->add_option("--tensor", a->tensors, "safetensors input: convert only these tensors (repeatable)");
    c->add_option("--name", a->name, "safetensors output: the tensor name for a .npy or raw input (default: the input's stem)");
    c->add_option("--as", a->as, "convert floating-point arrays: float16, bfloat16, float64 to float32 or back (other conversions are refused)");
    c->add_option("--dtype", a->dtype, "raw input: element type, e.g. float32 or >f4");
    c->add_option("--shape", a->shape, "raw input: the array's shape")->delimiter(',');
    c->add_option("--offset", a->offset, "raw input: bytes to skip")->check(non_negative);
    c->add_option("--count", a->count, "raw input: items to read (-1: the rest)");
    c->add_flag("--keep-byte-order", a->keep_byte_order,
                "npy and raw output: keep the input's byte order (default: native)");
    c->add_flag("--quiet,-q", a->quiet, "print nothing on success");
    c->add_flag("--no-checksums", a->no_checksums,
                "safetensors output: record no CRC-32C checksums (default: one per 64 MiB chunk of each tensor)");
    c->callback([a] {
        int rc = run_convert(*a);
        if (rc != exit_ok) throw CLI::RuntimeError(rc);
    });
}

}  // namespace ferry::cli
