// Compiles tests/test_pch.h into the precompiled header the test targets reuse (tests/CMakeLists.txt).
