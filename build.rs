// pyo3 links the libpython of the interpreter it finds at build time
// (PYO3_PYTHON). Record that library's folder as RUNPATH: otherwise the
// system's libpython3.11.so (Debian's 3.11.2) is loaded beside the venv's
// 3.11.7 standard library and imports fail (see shared DESIGN.md).
fn main() {
    pyo3_build_config::add_libpython_rpath_link_args();
}
