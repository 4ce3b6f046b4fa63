# The installable package: libmeganeura.so (the whole library and its C API, glslang inside, so a user's program
# needs nothing but it and libvulkan.so.1), the public headers, the `meganeura` command, and the
# files that find it: meganeuraConfig.cmake for find_package(meganeura CONFIG) and meganeura.pc for
# pkg-config. `export()` makes the build tree usable the same way (meganeura_DIR=<build>).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

file(GLOB C_API_SOURCES CONFIGURE_DEPENDS src/capi/*.cpp)
add_library(meganeura_shared SHARED ${C_API_SOURCES})
target_include_directories(meganeura_shared PRIVATE src)
target_link_libraries(meganeura_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,meganeura_core>")
target_include_directories(meganeura_shared INTERFACE
  $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include> $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(meganeura_shared INTERFACE cxx_std_20)
# glslang's and SPIRV-Tools' symbols stay inside: a program that links its own glslang must not
# bind to ours.
set(GLSLANG_EXCLUDED "")
foreach(lib ${GLSLANG_STATIC_LIBS})
  string(APPEND GLSLANG_EXCLUDED "lib${lib}.a:")
endforeach()
target_link_options(meganeura_shared PRIVATE "LINKER:--exclude-libs,${GLSLANG_EXCLUDED}" "LINKER:--no-undefined")
set_target_properties(meganeura_shared PROPERTIES
  OUTPUT_NAME meganeura EXPORT_NAME meganeura
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
add_library(meganeura::meganeura ALIAS meganeura_shared)

install(TARGETS meganeura_shared EXPORT meganeuraTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS meganeura RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/meganeura ${CMAKE_BINARY_DIR}/include/meganeura
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/meganeura)
install(EXPORT meganeuraTargets NAMESPACE meganeura:: DESTINATION ${CONFIG_DIR})
export(EXPORT meganeuraTargets NAMESPACE meganeura:: FILE ${CMAKE_BINARY_DIR}/meganeuraTargets.cmake)
configure_package_config_file(cmake/meganeuraConfig.cmake.in ${CMAKE_BINARY_DIR}/meganeuraConfig.cmake
                              INSTALL_DESTINATION ${CONFIG_DIR})
# 0.x releases: a minor version may break the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/meganeuraConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/meganeuraConfig.cmake ${CMAKE_BINARY_DIR}/meganeuraConfigVersion.cmake
        DESTINATION ${CONFIG_DIR})

# Relocatable: the prefix is found from the .pc file's own folder, so `cmake --install --prefix` anywhere works.
file(RELATIVE_PATH PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/meganeura.pc.in ${CMAKE_BINARY_DIR}/meganeura.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/meganeura.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
