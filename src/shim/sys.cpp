#include "shim/sys.hpp"

#ifdef FERRY_FAULT_INJECTION
namespace ferry::sys {
fault_hook hook = nullptr;
}
#endif
