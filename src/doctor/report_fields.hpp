// Readers of the doctor's JSON report that tolerate a missing or odd field (a probe that
// failed leaves its section partial): shared by the sections that read the report.
#pragma once

#include <string>

#include "doctor/probe_util.hpp"

namespace ferry::doctor {

/// j[key], or null when j is not an object or has no such key (const operator[] would assert).
inline const json& field(const json& j, const char* key) {
    static const json null_value;
    if (!j.is_object()) return null_value;
    auto it = j.find(key);
    return it == j.end() ? null_value : *it;
}

inline bool truthy(const json& j, const char* key) {
    if (!j.is_object()) return false;
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() && it->get<bool>();
}

inline std::string text_of(const json& j, const char* key, const std::string& otherwise = "") {
    if (!j.is_object()) return otherwise;
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : otherwise;
}

}  // namespace ferry::doctor
