// First object of the kernel object library: its zero-initialised byte marks
// where the kernels' static storage (their __shared__ variables) begins in
// .bss. The linker lays out .bss in input order, and this object precedes
// every kernel object (statics_end.cpp follows them); race.cpp checks the order.
extern "C" {
char cudasim_kernel_statics_begin[1];
}
