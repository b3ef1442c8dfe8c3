/* tiny.c — the program the exec storm exec()s: it does nothing and exits 0.
 *
 *   cc -static -O2 -nostdlib -DTINY_NOSTDLIB -o tiny tiny.c   (x86-64 / aarch64: ~1 page of code)
 *   cc -static -O2 -o tiny tiny.c                              (anywhere else)
 *
 * Why so small: an exec's cost grows with what the loader must map and what libc's start-up
 * runs. Without libc there is no dynamic loader, no relocations, no TLS set-up, no stdio: the
 * kernel maps one segment and the first instruction is the exit syscall. Exit status 0 is what
 * tells execstorm the exec really happened (a failed execve in the child exits 127).
 */
#if defined(TINY_NOSTDLIB) && defined(__x86_64__)
__attribute__((naked, noreturn)) void _start(void)
{
    /* exit_group(0) */
    __asm__ volatile("mov $231, %eax\n\txor %edi, %edi\n\tsyscall\n");
}
#elif defined(TINY_NOSTDLIB) && defined(__aarch64__)
__attribute__((naked, noreturn)) void _start(void)
{
    /* exit_group(0) */
    __asm__ volatile("mov x0, #0\n\tmov x8, #94\n\tsvc #0\n");
}
#else
int main(void)
{
    return 0;
}
#endif
