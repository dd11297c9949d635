# bench/scale/membersim.cmake — membersim: the scheduler's member simulator
# (issue 30), included by bench/scale/CMakeLists.txt. It speaks the wire
# protocol directly (psw, the generated Pswire messages), one nng REQ
# connection per simulated member.
add_executable(membersim ${CMAKE_CURRENT_LIST_DIR}/membersim.c)
target_link_libraries(membersim PRIVATE psw fb nng::nng Threads::Threads)
