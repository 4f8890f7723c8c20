// The whole public API of libferry.
#pragma once

#include "ferry/array.hpp"
#include "ferry/checksum.hpp"
#include "ferry/convert.hpp"
#include "ferry/dlpack.hpp"
#include "ferry/dtype.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/formats.hpp"
#include "ferry/load_options.hpp"
#include "ferry/memory.hpp"
#include "ferry/npy.hpp"
#include "ferry/raw.hpp"
#include "ferry/safetensors.hpp"
#include "ferry/settings.hpp"
#include "ferry/stats.hpp"
#include "ferry/version.hpp"
