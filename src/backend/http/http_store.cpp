// The http(s):// store operations (see http_store.hpp).
#include "backend/http/http_store.hpp"

#include <nlohmann/json.hpp>

namespace ferry::detail {

store_operations http_store() {
    store_operations o;
    o.probe = [](const location& where, const settings&) {
        nlohmann::json p;
        p["endpoint"] = where.origin();
        p["credentials"] = "none (plain or presigned URL)";
        return p;
    };
    return o;
}

}  // namespace ferry::detail
