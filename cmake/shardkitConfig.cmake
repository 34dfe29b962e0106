# shardkitConfig.cmake -- find_package(shardkit) for the header-only shardkit; `make install`
# puts it in <prefix>/lib/cmake/shardkit/, beside <prefix>/lib/pkgconfig/shardkit.pc.
#
#   shardkit::shardkit  the headers (<prefix>/include/shardkit, the directory shardkit.pc names),
#                       threads and libm: all that shardkit.h and the threads backend need
#   shardkit::mpi       shardkit::shardkit plus MPI, for sk_mpi.h; defined only when MPI is found
#
# MPI is optional: a project without it still gets shardkit::shardkit, and only
# find_package(shardkit COMPONENTS mpi) fails when MPI is missing. C, C++ and mixed projects work.
# As with any header-only library, exactly one source file defines SK_IMPL before the include.

include(CMakeFindDependencyMacro)

# The prefix from this file's own place (lib/cmake/shardkit/ under it), not from the prefix the
# install was made for: a DESTDIR-staged or moved install finds its own headers.
get_filename_component(_shardkit_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

find_dependency(Threads)

if(NOT TARGET shardkit::shardkit)
  add_library(shardkit::shardkit INTERFACE IMPORTED)
  set_target_properties(shardkit::shardkit PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_shardkit_prefix}/include/shardkit"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;m")
endif()

# FindMPI looks for a compiler wrapper of a language the project has enabled: C when it is,
# otherwise C++ (sk_mpi.h compiles as either).
get_property(_shardkit_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
set(_shardkit_lang "")
if("C" IN_LIST _shardkit_langs)
  set(_shardkit_lang C)
  set(_shardkit_ompi_wrapper mpicc.openmpi)
elseif("CXX" IN_LIST _shardkit_langs)
  set(_shardkit_lang CXX)
  set(_shardkit_ompi_wrapper mpicxx.openmpi)
endif()

if(_shardkit_lang AND NOT TARGET shardkit::mpi)
  if(NOT TARGET MPI::MPI_${_shardkit_lang})
    # shardkit's MPI backend is built and tested with Open MPI. Where Debian also has another
    # MPI whose plain mpicc could win, start FindMPI from Open MPI's own wrapper; a wrapper the
    # project already chose (MPI_<lang>_COMPILER) is kept, and without Open MPI's wrapper the
    # cache entry stays NOTFOUND, so FindMPI searches as usual.
    find_program(MPI_${_shardkit_lang}_COMPILER NAMES ${_shardkit_ompi_wrapper})
    set(_shardkit_quiet QUIET)
    if(shardkit_FIND_REQUIRED_mpi)
      set(_shardkit_quiet "")   # the project asked for MPI: let FindMPI say why it is missing
    endif()
    find_package(MPI ${_shardkit_quiet} COMPONENTS ${_shardkit_lang})
  endif()
  if(TARGET MPI::MPI_${_shardkit_lang})
    add_library(shardkit::mpi INTERFACE IMPORTED)
    set_target_properties(shardkit::mpi PROPERTIES
      INTERFACE_LINK_LIBRARIES "shardkit::shardkit;MPI::MPI_${_shardkit_lang}")
  endif()
endif()

# Components: only "mpi", found when its target exists.
if(TARGET shardkit::mpi)
  set(shardkit_mpi_FOUND TRUE)
else()
  set(shardkit_mpi_FOUND FALSE)
endif()
foreach(_shardkit_c IN LISTS shardkit_FIND_COMPONENTS)
  if(NOT _shardkit_c STREQUAL "mpi")
    set(shardkit_${_shardkit_c}_FOUND FALSE)
  endif()
  if(shardkit_FIND_REQUIRED_${_shardkit_c} AND NOT shardkit_${_shardkit_c}_FOUND)
    set(shardkit_FOUND FALSE)
    if(_shardkit_c STREQUAL "mpi")
      set(shardkit_NOT_FOUND_MESSAGE "component mpi needs MPI (on Debian: apt-get install libopenmpi-dev) and C or CXX enabled")
    else()
      set(shardkit_NOT_FOUND_MESSAGE "unknown component ${_shardkit_c} (the only one is mpi)")
    endif()
  endif()
endforeach()

unset(_shardkit_c)
unset(_shardkit_lang)
unset(_shardkit_langs)
unset(_shardkit_ompi_wrapper)
unset(_shardkit_prefix)
unset(_shardkit_quiet)
