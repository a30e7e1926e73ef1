# One precompiled header for the libraries (cmake/lib_pch.h), built once per build directory and
# reused by every library target (REUSE_FROM: the same compiler and flags — every library links
# ringpipe::warnings and nothing else sets target-wide options). CI builds most of the tree three
# times on 2 cores (release, tsan, the clang fuzz build) and the libraries' sources spent about a
# third of their compile time parsing the same standard, Abseil and Boost headers: measured on
# apps/clock_choice.cc 10.4 → 7.5 s, schedule/plan.cc 5.9 → 4.5 s, comm/codec.cc 3.3 → 2.1 s,
# runtime/fabric.cc 4.7 → 3.0 s (GCC 12, Release). The tests have their own (tests/CMakeLists.txt).
# RINGPIPE_LIB_PCH=OFF builds without it (e.g. to check that every source includes what it uses).
option(RINGPIPE_LIB_PCH "Precompile the libraries' common third-party headers (cmake/lib_pch.h)" ON)

if(RINGPIPE_LIB_PCH)
  add_library(ringpipe_lib_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/lib_pch.cc)
  target_link_libraries(ringpipe_lib_pch PRIVATE Boost::headers absl::status absl::statusor
                        absl::strings absl::str_format absl::flat_hash_map ringpipe::warnings)
  target_precompile_headers(ringpipe_lib_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/lib_pch.h)
endif()

# ringpipe_library_pch(TARGET): TARGET's sources reuse the libraries' precompiled header.
function(ringpipe_library_pch target)
  if(RINGPIPE_LIB_PCH)
    target_precompile_headers(${target} REUSE_FROM ringpipe_lib_pch)
  endif()
endfunction()
