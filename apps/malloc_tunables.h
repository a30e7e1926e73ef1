// glibc malloc tunables for a ringpipe process, applied by re-executing it once at start.
//
// In the PVM guests ringpipe's benchmarks run on, the first touch of a 4 KiB page costs 13–15 µs
// (a guest fault and the hypervisor's shadow-page fault) and a 512-device virtual run touches
// about 41 000 of them: setup (model shards, optimizers, the data set), the first step's
// population (runtime/heap.h), the evaluations. Backed by transparent huge pages, a 2 MiB range
// takes one guest fault; what is left is the host's cost of backing memory it does not back yet
// (a one-off loop touching 200–256 MiB, 2026-11-29: 0.25–0.34 µs per 4 KiB of a THP range the
// guest had just freed, 5–9 µs of one it had left free for seconds — this guest hands idle free
// memory back to the host — against 12.8–13.7 µs per 4 KiB page either way; whole runs in
// docs/fabric.md). glibc backs its heaps with THP only when told so at process start
// (GLIBC_TUNABLES, read by the dynamic loader before main; no mallopt sets it), and only for the
// part of a secondary arena's heap that is writable when the heap is made — hence a top pad of
// 32 MiB, which also makes each heap's first growth that large (address space, not memory).
//
// Contract:
//  - ApplyMallocTunables(argv): if GLIBC_TUNABLES is unset, sets it to kRingpipeMallocTunables
//    (and RINGPIPE_MALLOC_TUNED=1, so that it never loops) and execs /proc/self/exe with the same
//    argv; returns only if it did nothing or the exec failed (then the process goes on untuned,
//    the variables removed again). A user's own GLIBC_TUNABLES (any value, even empty) is left as
//    it is: that is also how to opt out. Sanitizer builds do nothing (their allocator is not
//    glibc's). Call it first thing in main, before any thread exists.
//    The re-executed process gets its file's name back as its process name (exec of
//    /proc/self/exe would leave "exe" for ps, top, pgrep and killall): RestoreProcessName().
//  - RestoreProcessName(): sets the calling thread's name (the process's, called before any
//    other thread exists) to the base name of /proc/self/exe's target, cut to the kernel's 15
//    bytes; false if it cannot be read or set.
//  - HeapOnHugePages(): see below.
//  - MallocTunablesInEffect(): what the report's host section records: the value in effect and
//    who set it ("ringpipe", "environment", or "none").
#pragma once

#include <string>

namespace rp::apps {

inline constexpr const char* kRingpipeMallocTunables = "glibc.malloc.hugetlb=1:glibc.malloc.top_pad=33554432";

void ApplyMallocTunables(char** argv);
bool RestoreProcessName();

struct MallocTunables {
  std::string value;   // GLIBC_TUNABLES as the process runs with it ("" if unset)
  std::string source;  // "ringpipe", "environment" or "none"
};
MallocTunables MallocTunablesInEffect();

// Whether glibc backs this process's heap with transparent huge pages: the tunables in effect ask
// for them (glibc.malloc.hugetlb=1 or 2) and the kernel's THP mode is not "never". Each arena's
// resident memory then rounds up to whole 2 MiB ranges (apps/memory_estimate.cc counts that).
bool HeapOnHugePages();

}  // namespace rp::apps
