# Third-party dependencies. Each is looked up in .deps/ first (filled by scripts/deps.sh for
# machines without network), then on the system.
set(FERRY_DEPS_DIR "${PROJECT_SOURCE_DIR}/.deps" CACHE PATH "Offline dependency bundle")
list(PREPEND CMAKE_PREFIX_PATH "${FERRY_DEPS_DIR}")

find_package(CUDAToolkit REQUIRED)
find_package(Threads REQUIRED)
# libcurl (Debian's, OpenSSL flavour): HTTP(S) and S3 sources, SigV4 signing (src/backend/http, s3).
find_package(CURL REQUIRED)
if(CURL_VERSION_STRING VERSION_LESS 7.85)
  message(FATAL_ERROR "ferry needs libcurl >= 7.85 (CURLOPT_AWS_SIGV4, CURLOPT_PROTOCOLS_STR); found ${CURL_VERSION_STRING}")
endif()

function(ferry_find_header var header what)
  find_path(${var} ${header} HINTS ${FERRY_DEPS_DIR}/include ${ARGN})
  if(NOT ${var})
    message(FATAL_ERROR "ferry needs ${what} (${header}); run scripts/deps.sh")
  endif()
endfunction()

ferry_find_header(FERRY_CLI11_INCLUDE CLI/CLI.hpp "CLI11")
ferry_find_header(FERRY_JSON_INCLUDE nlohmann/json.hpp "nlohmann/json")
ferry_find_header(FERRY_XXHASH_INCLUDE xxhash.h "xxHash")
ferry_find_header(FERRY_NVTX_INCLUDE nvtx3/nvToolsExt.h "NVTX 3" ${CUDAToolkit_INCLUDE_DIRS})

# cufile.h: the toolkit's, else the nvidia-cufile wheel's (never linked: loaded at run time).
execute_process(COMMAND python3 -c "import nvidia, os; print(';'.join(os.path.join(p, 'cu13', 'include') for p in nvidia.__path__))"
                OUTPUT_VARIABLE FERRY_WHEEL_INCLUDE OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
ferry_find_header(FERRY_CUFILE_INCLUDE cufile.h "cufile.h (CUDA toolkit or pip nvidia-cufile)"
                  ${CUDAToolkit_INCLUDE_DIRS} ${FERRY_WHEEL_INCLUDE})

# simdjson (Debian's libsimdjson-dev, a shared library): safetensors headers and checkpoint
# indexes are parsed at GB/s, on every open (src/formats, src/checkpoint).
ferry_find_header(FERRY_SIMDJSON_INCLUDE simdjson.h "simdjson")
find_library(FERRY_SIMDJSON_LIB simdjson HINTS ${FERRY_DEPS_DIR}/lib)
if(NOT FERRY_SIMDJSON_LIB)
  message(FATAL_ERROR "ferry needs simdjson (libsimdjson.so); run scripts/deps.sh")
endif()
add_library(ferry_simdjson INTERFACE)
target_include_directories(ferry_simdjson SYSTEM INTERFACE ${FERRY_SIMDJSON_INCLUDE})
target_link_libraries(ferry_simdjson INTERFACE ${FERRY_SIMDJSON_LIB})
# An installed libferry finds a simdjson that lies outside the system's directories (a bundle
# in .deps/lib, which CMake's INSTALL_RPATH_USE_LINK_PATH leaves out as part of the project)
# where it was built against.
get_filename_component(FERRY_SIMDJSON_DIR "${FERRY_SIMDJSON_LIB}" DIRECTORY)
set(FERRY_INSTALL_RPATH "")
if(NOT FERRY_SIMDJSON_DIR IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
  set(FERRY_INSTALL_RPATH "${FERRY_SIMDJSON_DIR}")
endif()

add_library(ferry_third_party INTERFACE)
target_include_directories(ferry_third_party SYSTEM INTERFACE
  ${FERRY_CLI11_INCLUDE} ${FERRY_JSON_INCLUDE} ${FERRY_XXHASH_INCLUDE})
add_library(ferry_cufile_header INTERFACE)
target_include_directories(ferry_cufile_header SYSTEM INTERFACE ${FERRY_CUFILE_INCLUDE})
add_library(ferry_nvtx INTERFACE)
target_include_directories(ferry_nvtx SYSTEM INTERFACE ${FERRY_NVTX_INCLUDE})

# liburing (Debian's liburing-dev): the io_uring source (src/backend/io_uring/). Linked
# statically where a static library is found, so that neither the wheel nor a machine it is
# installed on needs liburing; without it the source is compiled out and its probe says why
# (reason code io_uring_not_built).
add_library(ferry_liburing INTERFACE)
find_path(FERRY_LIBURING_INCLUDE liburing.h HINTS ${FERRY_DEPS_DIR}/include)
find_library(FERRY_LIBURING_LIB NAMES liburing.a uring HINTS ${FERRY_DEPS_DIR}/lib)
if(FERRY_LIBURING_INCLUDE AND FERRY_LIBURING_LIB)
  target_include_directories(ferry_liburing SYSTEM INTERFACE ${FERRY_LIBURING_INCLUDE})
  target_link_libraries(ferry_liburing INTERFACE ${FERRY_LIBURING_LIB})
  target_compile_definitions(ferry_liburing INTERFACE FERRY_HAVE_LIBURING=1)
  message(STATUS "ferry: io_uring source with ${FERRY_LIBURING_LIB}")
else()
  message(STATUS "ferry: liburing not found (scripts/deps.sh installs it): built without the io_uring source")
endif()

# zlib: CRC-32 (crc32_z, crc32_combine) for S3 objects that carry x-amz-checksum-crc32, the
# checksum AWS's SDKs record by default (src/backend/http/object_checksum.cpp). libcurl links it
# already; without it such objects are read unchecked and the plan says why.
add_library(ferry_zlib INTERFACE)
find_package(ZLIB QUIET)
if(ZLIB_FOUND)
  target_link_libraries(ferry_zlib INTERFACE ZLIB::ZLIB)
  target_compile_definitions(ferry_zlib INTERFACE FERRY_HAVE_ZLIB=1)
else()
  message(STATUS "ferry: zlib not found: S3 objects' x-amz-checksum-crc32 is not checked")
endif()
