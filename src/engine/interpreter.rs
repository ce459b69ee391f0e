//! Starting the embedded CPython as the venv's interpreter.
//!
//! Plain initialisation would make `sys.executable` the Rust binary; a process
//! spawned by Python (multiprocessing) would then re-run enginebench, which
//! spawns again. So: `PyConfig` with `program_name` and `executable` set to the
//! venv's python (which also makes `sys.prefix` the venv's), `parse_argv = 0`
//! (our CLI flags are not Python options), then release the GIL so that
//! `Python::attach` works from any thread.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{Result, bail};
use pyo3::ffi;

/// Initialises the interpreter once per process. Call after the process
/// environment is final: vLLM reads some variables at import time.
///
/// Errors: the interpreter reported a failed initialisation (message included).
pub fn initialize(venv_python: &Path) -> Result<()> {
    let program = CString::new(venv_python.as_os_str().as_bytes())?;
    // SAFETY: the PyConfig API is used as CPython documents it: initialise the
    // struct, set fields through the setter functions, initialise, clear.
    unsafe {
        if ffi::Py_IsInitialized() != 0 {
            bail!("the Python interpreter is already initialised in this process");
        }
        let mut config: ffi::PyConfig = std::mem::zeroed();
        ffi::PyConfig_InitPythonConfig(&mut config);
        config.parse_argv = 0;
        let mut status =
            ffi::PyConfig_SetBytesString(&mut config, &mut config.program_name, program.as_ptr());
        if ffi::PyStatus_Exception(status) == 0 {
            status = ffi::PyConfig_SetBytesString(
                &mut config,
                &mut config.executable,
                program.as_ptr(),
            );
        }
        if ffi::PyStatus_Exception(status) == 0 {
            status = ffi::Py_InitializeFromConfig(&config);
        }
        ffi::PyConfig_Clear(&mut config);
        if ffi::PyStatus_Exception(status) != 0 {
            let msg = if status.err_msg.is_null() {
                "unknown error".to_string()
            } else {
                std::ffi::CStr::from_ptr(status.err_msg).to_string_lossy().into_owned()
            };
            bail!("cannot start Python from {}: {msg}", venv_python.display());
        }
        ffi::PyEval_SaveThread();
    }
    Ok(())
}
