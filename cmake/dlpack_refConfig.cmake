# SPDX-License-Identifier: Apache-2.0
#
# CMake package configuration of an installed dlpack-ref:
#
#   find_package(dlpack_ref CONFIG REQUIRED)   # -Ddlpack_ref_DIR=$(dlpack-ref-config --cmakedir)
#   target_link_libraries(myext PRIVATE dlpack_ref::headers)
#
# Defines the interface target dlpack_ref::headers (include folder with
# dlpack.h), dlpack_ref_INCLUDE_DIR (that folder, also holding dlpack.pxd and
# dlpack_ref_api.pxd for `cython -I`) and dlpack_ref_CYTHON_DIR (the folder
# above the installed package: `cython -I` there makes `cimport dlpack_ref.dlpack`
# resolve even outside the interpreter's sys.path).
#
# This file lives at <site-packages>/dlpack_ref/share/cmake/dlpack_ref/.
get_filename_component(_dlpack_ref_package "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(dlpack_ref_INCLUDE_DIR "${_dlpack_ref_package}/include")
get_filename_component(dlpack_ref_CYTHON_DIR "${_dlpack_ref_package}/.." ABSOLUTE)
unset(_dlpack_ref_package)

if(NOT EXISTS "${dlpack_ref_INCLUDE_DIR}/dlpack.h")
  set(dlpack_ref_FOUND FALSE)
  set(dlpack_ref_NOT_FOUND_MESSAGE "no dlpack.h in ${dlpack_ref_INCLUDE_DIR}: a broken dlpack-ref install")
  return()
endif()

if(NOT TARGET dlpack_ref::headers)
  add_library(dlpack_ref::headers INTERFACE IMPORTED)
  set_target_properties(dlpack_ref::headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${dlpack_ref_INCLUDE_DIR}")
endif()
