// The precompiled header of the libraries (runtime/, runtime/model/, comm/, schedule/, apps/):
// the standard, Abseil and Boost headers most of their sources include, parsed once per build
// instead of once per source (cmake/RingpipePch.cmake says what it saves). Third-party and
// standard headers only, so editing the project never rebuilds it. Every source still includes
// what it uses; this header only makes those includes cheap.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/circular_buffer.hpp"
