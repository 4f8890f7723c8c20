// FERRY_EXPORT marks the public API: libferry.so is built with hidden visibility, so only what
// carries this macro (classes, their members, and free functions declared here) is exported.
#pragma once

#if defined(_WIN32)
#define FERRY_EXPORT
#else
#define FERRY_EXPORT __attribute__((visibility("default")))
#endif
