// ferry::registered_file: the public face of backend/registered.
#include "ferry/registered_file.hpp"

#include "backend/registered/registered_source.hpp"

namespace ferry {

registered_file::registered_file(const std::string& path) : impl_(detail::registered_source::create(path)) {}
registered_file::registered_file(registered_file&&) noexcept = default;
registered_file& registered_file::operator=(registered_file&&) noexcept = default;
registered_file::~registered_file() = default;

const std::string& registered_file::path() const noexcept {
    static const std::string none;
    return impl_ ? impl_->location() : none;
}
std::uint64_t registered_file::size() const noexcept { return impl_ ? impl_->size() : 0; }
double registered_file::seconds() const noexcept { return impl_ ? impl_->seconds() : 0; }
void registered_file::close() noexcept { impl_.reset(); }

void set_registration_limit(std::uint64_t bytes) { detail::set_registration_limit(bytes); }
std::uint64_t registration_limit() { return detail::registration_limit(); }
std::uint64_t registered_bytes() { return detail::registered_bytes(); }

}  // namespace ferry
