// Empty: the object library that builds cmake/lib_pch.h (cmake/RingpipePch.cmake).
