# Links libhybridsync into every program of a CMake project without changing
# its sources: give it to the project's configure step as
#
#   cmake -DCMAKE_PREFIX_PATH=/opt/hybridsync \
#         -DCMAKE_PROJECT_INCLUDE=/path/to/gromacs-link.cmake ...
#
# CMake includes this file right after the project's project() call, so
# every program and shared library linked afterwards depends on
# libhybridsync, found through its CMake package. --no-as-needed keeps it a
# dependency of programs that call none of its functions: its interposer
# then replaces CUDA's synchronize calls from inside the program, as it
# does under LD_PRELOAD. The library file is linked by its path, which adds
# no include directory to any compile line: a build tree configured without
# this file is relinked, not recompiled. CMake puts the library's directory
# in the programs' run path (CMAKE_INSTALL_RPATH_USE_LINK_PATH).
find_package(hybridsync 0.1 REQUIRED)
add_link_options("LINKER:--no-as-needed")
link_libraries("$<TARGET_FILE:hybridsync::hybridsync>")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
