// Last object of the kernel object library: marks where the kernels' static
// storage ends (see statics_begin.cpp).
extern "C" {
char cudasim_kernel_statics_end[1];
}
