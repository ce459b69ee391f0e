//! The real ROCm SMI paths on a machine without an AMD GPU: Debian's
//! `librocm-smi64-1` and `rocm-smi` (ci/test.sh installs them). Each source
//! must say why it is not used in the tools' own words.

use crate::util::{enginebench, text};

#[test]
fn rocm_smi_library_and_cli_carry_their_own_messages() {
    let have_cli = std::path::Path::new("/usr/bin/rocm-smi").exists();
    let have_lib = std::path::Path::new("/usr/lib/librocm_smi64.so.1").exists();
    if !(have_cli && have_lib) {
        eprintln!("skipped: Debian's rocm-smi and librocm-smi64-1 are not installed (ci/test.sh installs them)");
        return;
    }
    let out = enginebench(&["telemetry", "--seconds", "0.2", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = |name: &str| {
        report["sources"].as_array().unwrap().iter().find(|s| s["name"] == name).map(|s| {
            assert_eq!(s["used"], false, "{s}");
            s["reason"].as_str().unwrap().to_string()
        }).unwrap_or_else(|| panic!("no {name} source in {report}"))
    };
    let lib = reason("rocm_smi");
    assert!(lib.contains("rsmi_init failed") && lib.contains("the library said:"), "{lib}");
    let cli = reason("rocm-smi");
    assert!(cli.contains("rocm-smi said:") && cli.contains("Driver not initialized"), "{cli}");
    // The library's own lines go into the reason, not to the terminal.
    assert!(!String::from_utf8_lossy(&out.stderr).contains("Exception caught"), "{}", text(&out));
}
