// The ferry._ferry extension: libferry for Python. This file holds the module, the mapping of
// ferry's exceptions to Python's, settings, statistics, the doctor and the version.
#include <Python.h>

#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "bind.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/doctor.hpp"
#include "ferry/error.hpp"
#include "ferry/integrity.hpp"
#include "ferry/settings.hpp"
#include "ferry/stats.hpp"
#include "ferry/version.hpp"

namespace ferry::python {

namespace {

using namespace nb::literals;

// The Python classes live in ferry/_errors.py (they need multiple inheritance: ferry.Error
// and ValueError, ferry.Error and OSError); this raises one made from the C++ exception.
void raise_python(const char* kind, const char* message, nb::dict attrs) {
    try {
        nb::object make = nb::module_::import_("ferry._errors").attr("_from_native");
        // Messages escape the bytes of paths that are not UTF-8; should one slip through, it
        // still becomes text rather than nanobind's "conversion error" in place of the error.
        nb::object text = nb::steal(PyUnicode_DecodeUTF8(message, static_cast<Py_ssize_t>(std::strlen(message)),
                                                         "backslashreplace"));
        if (!text) throw nb::python_error();
        nb::object exc = make(kind, text, attrs);
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    } catch (nb::python_error& e) {
        e.restore();
    }
}

// A path as Python names it: its bytes decoded as os.fsdecode does (undecodable bytes become
// surrogates), so an error's filename reopens the file even when it is not UTF-8.
nb::object path_text(const std::string& path) {
    nb::object text = nb::steal(PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size())));
    if (!text) throw nb::python_error();
    return text;
}

nb::dict where_dict(const io_context& w) {
    nb::dict d;
    d["filename"] = w.path.empty() ? nb::object(nb::none()) : path_text(w.path);
    d["offset"] = w.offset;
    d["length"] = w.length;
    return d;
}

void translate(const std::exception_ptr& p, void*) {
    try {
        std::rethrow_exception(p);
    } catch (const checkpoint_error& e) {
        nb::dict d;
        d["filename"] = path_text(e.file());
        d["field"] = e.field();
        d["reason"] = e.reason();
        d["tensor"] = e.tensor();
        raise_python("checkpoint", e.what(), d);
    } catch (const integrity_error& e) {
        nb::dict d;
        d["filename"] = path_text(e.file());
        d["tensor"] = e.tensor();
        d["reason"] = e.reason();
        d["begin"] = e.begin();
        d["end"] = e.end();
        d["expected"] = e.expected();
        d["actual"] = e.actual();
        raise_python("integrity", e.what(), d);
    } catch (const checkpoint_changed_error& e) {
        nb::dict d;
        d["filename"] = path_text(e.file());
        d["reason"] = e.reason();
        raise_python("checkpoint_changed", e.what(), d);
    } catch (const checkpoint_io_error& e) {
        nb::dict d;
        d["complete"] = nb::cast(e.complete());
        d["incomplete"] = nb::cast(e.incomplete());
        raise_python("checkpoint_io", e.what(), d);
    } catch (const format_error& e) {
        nb::dict d;
        d["filename"] = path_text(e.file());
        d["field"] = e.field();
        d["reason"] = e.reason();
        raise_python("format", e.what(), d);
    } catch (const settings_error& e) {
        nb::dict d;
        d["variable"] = e.variable();
        raise_python("settings", e.what(), d);
    } catch (const usage_error& e) {
        raise_python("usage", e.what(), nb::dict());
    } catch (const end_of_file_error& e) {
        nb::dict d = where_dict(e.where());
        d["file_size"] = e.file_size();
        raise_python("eof", e.what(), d);
    } catch (const system_error& e) {
        nb::dict d = where_dict(e.where());
        d["errno"] = e.code();
        raise_python("system", e.what(), d);
    } catch (const cufile_error& e) {
        nb::dict d = where_dict(e.where());
        d["code"] = e.code();
        raise_python("cufile", e.what(), d);
    } catch (const cuda_error& e) {
        nb::dict d = where_dict(e.where());
        d["code"] = e.code();
        raise_python("cuda", e.what(), d);
    } catch (const remote_error& e) {
        nb::dict d = where_dict(e.where());
        d["status"] = e.status();
        d["url"] = e.url();
        d["credentials"] = e.credentials();
        raise_python("remote", e.what(), d);
    } catch (const error& e) {
        raise_python("error", e.what(), nb::dict());
    }
}

// Settings travel as {attribute: text}, attributes being the variable names without FERRY_
// in lower case; apply_setting parses (and names the variable when a value is bad).
std::string attribute_of(std::string_view variable) {
    std::string a(variable.substr(6));
    for (auto& c : a) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return a;
}

std::string variable_of(const std::string& attribute) {
    std::string v = "FERRY_";
    for (char c : attribute) v += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (std::string_view known : settings::variable_names()) {
        if (known == v) return v;
    }
    throw usage_error("ferry has no setting '" + attribute + "'");
}

nb::dict settings_dict(const settings& s) {
    return nb::cast<nb::dict>(nb::module_::import_("json").attr("loads")(to_json(s)));
}

settings with_values(settings s, const std::map<std::string, std::string>& values) {
    for (const auto& [attribute, text] : values) apply_setting(s, variable_of(attribute), text);
    return s;
}

// The environment's settings with every variable that does not parse left at its default, and
// the error of each such variable: what lets code override a bad FERRY_* value and lets
// ferry.settings be inspected while one is set.
struct lenient_environment {
    settings values;
    std::vector<settings_error> errors;
};

lenient_environment environment_leniently() {
    lenient_environment r;
    std::set<std::string> skipped;
    for (;;) {
        try {
            r.values = settings::from_lookup([&](std::string_view name) -> std::optional<std::string> {
                std::string n(name);
                if (skipped.count(n)) return std::nullopt;
                const char* v = std::getenv(n.c_str());
                if (!v) return std::nullopt;
                return std::string(v);
            });
            return r;
        } catch (const settings_error& e) {
            if (!skipped.insert(e.variable()).second) throw;
            r.errors.push_back(e);
        }
    }
}

// The process-wide settings, or (before their first use, while a FERRY_* variable is bad) the
// environment's without the bad variables, and their errors.
lenient_environment current_settings() {
    try {
        return {settings::global(), {}};
    } catch (const settings_error&) {
        return environment_leniently();
    }
}

}  // namespace

void bind_errors(nb::module_&) { nb::register_exception_translator(&translate); }

void bind_runtime(nb::module_& m) {
    m.def("version", [] { return std::string(ferry::version()); });

    m.def("get_settings", [] { return settings_dict(current_settings().values); },
          "The process-wide settings as {name: value} (a FERRY_* variable that does not parse\n"
          "shows its default; settings_errors() says which).");
    m.def("environment_settings", [] { return settings_dict(environment_leniently().values); },
          "The settings the FERRY_* environment variables give (over the defaults; a variable\n"
          "that does not parse gives its default).");
    m.def(
        "settings_errors",
        [](bool of_environment) {
            std::vector<std::string> out;
            auto r = of_environment ? environment_leniently() : current_settings();
            for (const auto& e : r.errors) out.push_back(e.what());
            return out;
        },
        "of_environment"_a = false,
        "Why each FERRY_* variable that does not parse is not used (while code has not set the\n"
        "settings; of_environment: in any case).");
    m.def("default_settings", [] { return settings_dict(settings{}); });
    m.def("resolved_settings", [] { return settings_dict(current_settings().values.resolved()); },
          "The process-wide settings with every 0 ('derive') replaced by its value here.");
    m.def(
        "set_settings",
        [](const std::map<std::string, std::string>& values, bool from_defaults) {
            if (from_defaults) {
                settings::set_global(with_values(settings{}, values));
                return;
            }
            // Values given in code win over the environment: a bad FERRY_* variable is an error
            // only while code leaves it unset.
            lenient_environment base = current_settings();
            settings s = with_values(base.values, values);
            for (const auto& e : base.errors)
                if (!values.count(attribute_of(e.variable()))) throw e;
            settings::set_global(s);
        },
        "values"_a, "from_defaults"_a = false,
        "Changes the process-wide settings (files opened later use them); values are text as\n"
        "in the FERRY_* variables ('8M', 'auto').");
    m.def("settings_names", [] {
        std::vector<std::string> names;
        for (std::string_view v : settings::variable_names()) names.push_back(attribute_of(v));
        return names;
    });

    m.def("stats", [] {
        nb::dict d = stats_dict(process_stats());
        d["staging_memory_in_use"] = staging_memory_in_use();
        d["staging_memory_peak"] = staging_memory_peak();
        return d;
    });
    m.def("reset_stats", [] { reset_process_stats(); });

    m.def(
        "doctor",
        [](const std::vector<std::string>& paths) {
            doctor_options o;
            o.paths = paths;
            nb::gil_scoped_release nogil;
            return run_doctor(o).json;
        },
        "paths"_a = std::vector<std::string>{},
        "Runs ferry's doctor and returns its JSON report (the keys of `ferry doctor --json`).");
    m.def(
        "doctor_text",
        [](const std::vector<std::string>& paths) {
            doctor_options o;
            o.paths = paths;
            nb::gil_scoped_release nogil;
            return run_doctor(o).text;
        },
        "paths"_a = std::vector<std::string>{});

    m.def("cuda_device_count", [] { return cuda_device_count(); },
          "Usable CUDA devices (0 without a GPU or driver).");
    m.def("cuda_unavailable_reason", [] { return cuda_unavailable_reason(); },
          "Why CUDA is unusable here, or '' when it is usable.");
}

}  // namespace ferry::python

namespace ferry::python {
void bind_distributed(nb::module_& m);  // distributed.cpp
void bind_registration(nb::module_& m);  // file.cpp
void bind_many(nb::module_& m);          // many.cpp
}  // namespace ferry::python

NB_MODULE(_ferry, m) {
    m.doc() = "ferry's native layer: libferry bound with nanobind. Use the ferry package.";
    ferry::python::bind_errors(m);
    ferry::python::bind_array(m);
    ferry::python::bind_file(m);
    ferry::python::bind_registration(m);
    ferry::python::bind_formats(m);
    ferry::python::bind_checkpoint(m);
    ferry::python::bind_many(m);
    ferry::python::bind_distributed(m);
    ferry::python::bind_runtime(m);
}
