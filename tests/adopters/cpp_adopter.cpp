/* The C adopter compiled as C++17 (tests/test_adopters.py builds it with
 * -Werror): the vendored header and a C-style adopter hold in C++
 * translation units too. One source serves both, so the two cannot drift. */
#define ADOPTER_NAME cpp_adopter
#include "c_adopter.c"
