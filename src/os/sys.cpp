#include "os/sys.hpp"

namespace ferry::sys {
std::atomic<fault_hook> hook{nullptr};
}
