# oled.cmake - CMake targets for the SSD1306 OLED library and the host screen simulator.
#
# FOR firmware/esp32/host/CMakeLists.txt (the engine's host build): include this file once,
#     include(${CMAKE_CURRENT_SOURCE_DIR}/sim/oled.cmake)
# then link what you need:
#     target_link_libraries(gs_run PRIVATE gs_sim)   # gs_sim brings gs_oled and both include dirs
# It defines:
#     gs_oled        STATIC  lib/oled (portable C99: framebuffer, font, console, SSD1306 stream)
#     gs_sim         STATIC  host/sim (simulated SSD1306, PNG writer, gs_sim_screen_*); gs_sim.h
#     gs_sim_shared  SHARED  libgs_sim.so = gs_oled + gs_sim + sim_capi.c, for the ctypes tests
#     gs_screen      EXECUTABLE `gs-screen [--scale N] [--chunk N] OUT.png < text`
# All built -std=c99 with -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror (GCC/Clang),
# position-independent so the static libraries also link into shared objects. Needs CMake >= 3.16
# and an including project with C enabled (project(... LANGUAGES C)).

set(GS_OLED_DIR ${CMAKE_CURRENT_LIST_DIR}/../../lib/oled)
set(GS_SIM_DIR ${CMAKE_CURRENT_LIST_DIR})

function(gs_oled_strict_c target)
    set_target_properties(${target} PROPERTIES
        C_STANDARD 99
        C_STANDARD_REQUIRED ON
        C_EXTENSIONS OFF
        POSITION_INDEPENDENT_CODE ON)
    if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
        target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror)
    endif()
endfunction()

add_library(gs_oled STATIC
    ${GS_OLED_DIR}/oled_font.c
    ${GS_OLED_DIR}/oled_gfx.c
    ${GS_OLED_DIR}/oled_text.c
    ${GS_OLED_DIR}/oled_controller.c)
target_include_directories(gs_oled PUBLIC ${GS_OLED_DIR})
gs_oled_strict_c(gs_oled)

add_library(gs_sim STATIC
    ${GS_SIM_DIR}/panel_sim.c
    ${GS_SIM_DIR}/png_writer.c
    ${GS_SIM_DIR}/sim_screen.c)
target_include_directories(gs_sim PUBLIC ${GS_SIM_DIR})
target_link_libraries(gs_sim PUBLIC gs_oled)
gs_oled_strict_c(gs_sim)

# One shared object with every oled_* and gs_sim_* symbol, loaded by the pytest suite.
add_library(gs_sim_shared SHARED
    $<TARGET_OBJECTS:gs_oled>
    $<TARGET_OBJECTS:gs_sim>
    ${GS_SIM_DIR}/sim_capi.c)
target_include_directories(gs_sim_shared PRIVATE ${GS_OLED_DIR} ${GS_SIM_DIR})
set_target_properties(gs_sim_shared PROPERTIES OUTPUT_NAME gs_sim)
gs_oled_strict_c(gs_sim_shared)

add_executable(gs_screen ${GS_SIM_DIR}/gs_screen_main.c)
set_target_properties(gs_screen PROPERTIES OUTPUT_NAME gs-screen)
target_link_libraries(gs_screen PRIVATE gs_sim)
gs_oled_strict_c(gs_screen)
