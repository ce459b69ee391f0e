# enginebench: what a launcher finds in the import sandbox (`enginebench
# doctor`, and root's check that a sandbox runs unprivileged). One
# "KEY<TAB>VALUE" line each, into the record folder.
{
    printf 'uid\t%s\n' "$(id -u)"
    printf 'capabilities\t%s\n' "$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)"
    printf 'processes\t%s\n' "$(ulimit -u)"
    if ! command -v unshare >/dev/null; then
        printf 'user_namespaces\tunknown (no unshare)\n'
    elif unshare --user true 2>/dev/null; then
        printf 'user_namespaces\tallowed\n'
    else
        printf 'user_namespaces\trefused\n'
    fi
    if ! command -v mount >/dev/null; then
        printf 'remount\tunknown (no mount)\n'
    elif mount -o remount,bind,rw /usr 2>/dev/null; then
        printf 'remount\tallowed\n'
    else
        printf 'remount\trefused\n'
    fi
    # The sandbox's own process name: harmless to write, refused when /proc is read-only.
    if (echo probe > /proc/self/comm) 2>/dev/null; then
        printf 'proc\twritable\n'
    else
        printf 'proc\tread-only\n'
    fi
    # Only looked at, never written.
    if [ -e /proc/sys/kernel/core_pattern ]; then
        printf 'proc_sys\tvisible\n'
    else
        printf 'proc_sys\thidden\n'
    fi
} > /eb/rec/probe
