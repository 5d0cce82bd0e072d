# Warnings, ccache and the LibTorch precompiled header settings shared by every target.
find_program(MFSDP_CCACHE ccache)
if(MFSDP_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  # Precompiled headers defeat ccache unless it may ignore their defines and mtimes.
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      ${MFSDP_CCACHE})
endif()

add_library(mfsdp_warnings INTERFACE)
target_compile_options(mfsdp_warnings INTERFACE -Wall -Wextra
  # GCC 12 reports false positives inside LibTorch and nlohmann headers.
  $<$<CXX_COMPILER_ID:GNU>:-Wno-stringop-overflow>)
