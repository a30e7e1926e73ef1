# Warnings and sanitizer flags live on INTERFACE targets, never in global flags.
add_library(ringpipe_warnings INTERFACE)
add_library(ringpipe::warnings ALIAS ringpipe_warnings)
target_compile_options(ringpipe_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND RINGPIPE_THREAD_SAFETY)
  target_compile_options(ringpipe_warnings INTERFACE
    -Wthread-safety -Wthread-safety-beta -Werror=thread-safety -Werror=thread-safety-beta)
endif()

# Sanitizers apply to everything we build (our code and tests), so they go on every target that
# links ringpipe::warnings.
if(RINGPIPE_SANITIZE)
  # Line tables only (not full -g): every sanitizer report still names function, file and line, and
  # the sanitizer builds compile and link faster (README.md "Building by hand"). The sanitizer
  # presets drop RelWithDebInfo's -g for the same reason.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(_ringpipe_line_tables -gline-tables-only)
  else()
    set(_ringpipe_line_tables -g1)
  endif()
  target_compile_options(ringpipe_warnings INTERFACE -fsanitize=${RINGPIPE_SANITIZE}
    -fno-omit-frame-pointer ${_ringpipe_line_tables})
  target_link_options(ringpipe_warnings INTERFACE -fsanitize=${RINGPIPE_SANITIZE})
  if(RINGPIPE_SANITIZE MATCHES "undefined")
    target_compile_options(ringpipe_warnings INTERFACE -fno-sanitize-recover=all)
  endif()
  if(RINGPIPE_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # Boost.Asio uses standalone atomic_thread_fence (see tsan.supp); GCC warns about each use.
    target_compile_options(ringpipe_warnings INTERFACE -Wno-tsan)
  endif()
endif()

# Reduction kernels: GCC 12 at -O2 does not vectorise dst[i] += src[i]; those sources get -O3.
function(ringpipe_hot_sources)
  if(NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
    set_source_files_properties(${ARGN} DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
      PROPERTIES COMPILE_OPTIONS "-O3")
  endif()
endfunction()
