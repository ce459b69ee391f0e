//! Parsers for `amd-smi metric --json` and `rocm-smi --json`, the second AMD
//! fallback when neither `libamd_smi.so` nor `librocm_smi64.so` can be loaded.
//!
//! Field names come from AMD's documentation and the amd-smi CLI source
//! (`amdsmi_cli/amdsmi_commands.py`, `metric_gpu`) and ROCm SMI (`rocm_smi.py`):
//!
//! | reading | amd-smi `metric --json` | rocm-smi `--json` (per `cardN`) |
//! |---|---|---|
//! | power W | `power.socket_power` (amd-smi picks current or average, whichever is valid); `power.current_socket_power` / `average_socket_power` where present | `Current Socket Graphics Package Power (W)`, else `Average Graphics Package Power (W)` |
//! | energy J | `energy.total_energy_consumption` | `Accumulated Energy (uJ)` / 1e6 |
//! | temperature °C | `temperature.edge`, `.hotspot`, `.mem` | `Temperature (Sensor edge\|junction\|memory) (C)` |
//! | clocks MHz | `clock.gfx_0.clk` (older: `clock.gfx.clk`), `clock.mem_0.clk` | `sclk clock speed:`, `mclk clock speed:` ("(1700Mhz)") |
//! | GFX activity % | `usage.gfx_activity` (0.0.x CLI: `usage.gfx_usage`) | `GPU use (%)` |
//! | VRAM | `mem_usage.used_vram`, `.total_vram` (MB, i.e. MiB: the CLI divides bytes by 1024²) | `VRAM Total Used Memory (B)`, `VRAM Total Memory (B)` |
//!
//! Layouts: before ROCm 6.2 values are bare numbers or strings with a unit
//! ("550 W"); from 6.2 on, JSON values are `{"value": .., "unit": ..}`; from
//! ROCm 6.4/7.x the per-GPU list is wrapped as `{"gpu_data": [..]}`. A reading
//! the tool could not get is the string "N/A".

use serde_json::Value;

use super::GpuReading;

/// A number from an amd-smi / rocm-smi JSON value, with its unit if it had one:
/// numbers; numeric strings with an optional unit ("550 W", "(1700Mhz)");
/// `{"value": .., "unit": ..}` objects. "N/A" and anything else: `None`.
pub fn value_with_unit(v: &Value) -> Option<(f64, Option<String>)> {
    match v {
        Value::Number(n) => n.as_f64().map(|x| (x, None)),
        Value::String(s) => parse_str(s),
        Value::Object(m) => {
            let (x, unit) = value_with_unit(m.get("value")?)?;
            let unit = m.get("unit").and_then(|u| u.as_str()).map(str::to_owned).or(unit);
            Some((x, unit))
        }
        _ => None,
    }
}

fn parse_str(s: &str) -> Option<(f64, Option<String>)> {
    let s = s.trim().trim_start_matches('(').trim_end_matches(')').trim();
    if s.is_empty() || s.eq_ignore_ascii_case("n/a") || s.eq_ignore_ascii_case("[n/a]") {
        return None;
    }
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+')) || c == 'e' || c == 'E'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let x: f64 = s[..end].parse().ok()?;
    let unit = s[end..].trim();
    Some((x, if unit.is_empty() { None } else { Some(unit.to_owned()) }))
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |node, k| node.get(*k))
}

/// Watts from a power value: W by default, mW and uW/µW converted.
fn watts(v: &Value) -> Option<f64> {
    let (x, unit) = value_with_unit(v)?;
    let f = match unit.as_deref().map(str::to_ascii_lowercase).as_deref() {
        Some("mw") => 1e-3,
        Some("uw") | Some("µw") => 1e-6,
        _ => 1.0,
    };
    // UINT16_MAX / UINT32_MAX are the library's "unsupported" markers.
    if x == 65535.0 || x == 4294967295.0 { None } else { Some(x * f) }
}

/// Joules from an energy value: J by default, mJ and uJ/µJ converted.
fn joules(v: &Value) -> Option<f64> {
    let (x, unit) = value_with_unit(v)?;
    let f = match unit.as_deref().map(str::to_ascii_lowercase).as_deref() {
        Some("mj") => 1e-3,
        Some("uj") | Some("µj") => 1e-6,
        Some("kj") => 1e3,
        _ => 1.0,
    };
    Some(x * f)
}

/// Bytes from an amd-smi memory value: MB (MiB) by default, B/KB/GB converted
/// with powers of 1024 as the CLI computes them.
fn mib_bytes(v: &Value) -> Option<u64> {
    let (x, unit) = value_with_unit(v)?;
    let f = match unit.as_deref().map(str::to_ascii_uppercase).as_deref() {
        Some("B") => 1.0,
        Some("KB") | Some("KIB") => 1024.0,
        Some("GB") | Some("GIB") => 1024.0 * 1024.0 * 1024.0,
        _ => 1024.0 * 1024.0,
    };
    Some((x * f) as u64)
}

fn plain(v: Option<&Value>) -> Option<f64> {
    v.and_then(value_with_unit).map(|(x, _)| x)
}

/// The per-GPU entries of an `amd-smi metric --json` document (list, a
/// `{"gpu_data": [..]}` wrapper, or a single GPU object).
fn amd_smi_entries(doc: &Value) -> Vec<&Value> {
    match doc {
        Value::Array(a) => a.iter().collect(),
        Value::Object(m) => match m.get("gpu_data").or_else(|| m.get("gpus")) {
            Some(Value::Array(a)) => a.iter().collect(),
            _ if m.contains_key("gpu") => vec![doc],
            _ => vec![],
        },
        _ => vec![],
    }
}

/// Parse `amd-smi metric --json` (any of the layouts above) into one reading
/// per GPU, in the document's order. GPU index: the entry's `gpu` field, else
/// its position.
pub fn parse_amd_smi_metric(text: &str) -> Result<Vec<GpuReading>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("amd-smi JSON: {e}"))?;
    let entries = amd_smi_entries(&doc);
    if entries.is_empty() {
        return Err("amd-smi JSON: no GPU entries".into());
    }
    let mut out = Vec::new();
    for (pos, e) in entries.into_iter().enumerate() {
        let gpu = e.get("gpu").and_then(|g| g.as_u64()).unwrap_or(pos as u64) as u32;
        let p = |k: &str| get(e, &["power", k]).and_then(watts);
        let current = p("current_socket_power");
        let average = p("average_socket_power");
        let power_w = current.or_else(|| p("socket_power")).or(average);
        let clock = |names: &[&str]| {
            names.iter().find_map(|n| plain(get(e, &["clock", n, "clk"])).or_else(|| plain(get(e, &["clock", n]))))
        };
        out.push(GpuReading {
            gpu,
            power_w,
            power_avg_w: average,
            energy_j: get(e, &["energy", "total_energy_consumption"]).and_then(joules),
            temp_c: plain(get(e, &["temperature", "edge"])),
            temp_hotspot_c: plain(get(e, &["temperature", "hotspot"])),
            temp_mem_c: plain(get(e, &["temperature", "mem"])),
            gfx_clock_mhz: clock(&["gfx_0", "gfx"]),
            mem_clock_mhz: clock(&["mem_0", "mem"]),
            util_pct: plain(get(e, &["usage", "gfx_activity"])).or_else(|| plain(get(e, &["usage", "gfx_usage"]))),
            mem_util_pct: plain(get(e, &["usage", "umc_activity"])),
            mem_used_bytes: get(e, &["mem_usage", "used_vram"]).and_then(mib_bytes),
            mem_total_bytes: get(e, &["mem_usage", "total_vram"]).and_then(mib_bytes),
            ..Default::default()
        });
    }
    Ok(out)
}

/// Parse `rocm-smi ... --json` (`{"card0": {...}, "card1": {...}, "system": {...}}`)
/// into one reading per card, ordered by card number.
pub fn parse_rocm_smi(text: &str) -> Result<Vec<GpuReading>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("rocm-smi JSON: {e}"))?;
    let obj = doc.as_object().ok_or("rocm-smi JSON: not an object")?;
    let mut out = Vec::new();
    for (k, card) in obj {
        let Some(n) = k.strip_prefix("card").and_then(|n| n.parse::<u32>().ok()) else { continue };
        let f = |key: &str| plain(card.get(key));
        let current = card.get("Current Socket Graphics Package Power (W)").and_then(watts);
        let average = card.get("Average Graphics Package Power (W)").and_then(watts);
        out.push(GpuReading {
            gpu: n,
            power_w: current.or(average),
            power_avg_w: average,
            energy_j: f("Accumulated Energy (uJ)").map(|uj| uj * 1e-6),
            temp_c: f("Temperature (Sensor edge) (C)"),
            temp_hotspot_c: f("Temperature (Sensor junction) (C)"),
            temp_mem_c: f("Temperature (Sensor memory) (C)"),
            gfx_clock_mhz: f("sclk clock speed:"),
            mem_clock_mhz: f("mclk clock speed:"),
            util_pct: f("GPU use (%)"),
            mem_util_pct: f("GPU memory use (%)"),
            mem_used_bytes: f("VRAM Total Used Memory (B)").map(|b| b as u64),
            mem_total_bytes: f("VRAM Total Memory (B)").map(|b| b as u64),
            ..Default::default()
        });
    }
    if out.is_empty() {
        return Err("rocm-smi JSON: no cardN entries".into());
    }
    out.sort_by_key(|r| r.gpu);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// amd-smi before units (ROCm 6.0/6.1): a bare list, bare numbers and
    /// strings with units, the 0.0.x `gfx_usage` name, N/A.
    const OLD: &str = r#"[
      {"gpu": 0,
       "usage": {"gfx_usage": 87, "umc_activity": "N/A", "mm_activity": "N/A"},
       "power": {"socket_power": "212 W", "gfx_voltage": "N/A", "power_management": "ENABLED"},
       "clock": {"gfx": {"clk": "1700 MHz"}, "mem": {"clk": 1300}},
       "temperature": {"edge": 45, "hotspot": "52", "mem": "N/A"},
       "energy": {"total_energy_consumption": "123456.789 J"},
       "mem_usage": {"total_vram": "65520 MB", "used_vram": 1024}},
      {"gpu": 1,
       "usage": "N/A",
       "power": {"socket_power": "N/A"},
       "temperature": {"edge": "N/A", "hotspot": "N/A", "mem": "N/A"},
       "energy": "N/A",
       "mem_usage": {"total_vram": "N/A", "used_vram": "N/A"}}
    ]"#;

    /// amd-smi with units (ROCm 6.2/6.3): a list of {"value", "unit"} objects,
    /// two MI300X: socket_power is the current power, the average is N/A.
    const MID: &str = r#"[
      {"gpu": 0,
       "usage": {"gfx_activity": {"value": 99, "unit": "%"}, "umc_activity": {"value": 41, "unit": "%"}, "mm_activity": "N/A"},
       "power": {"socket_power": {"value": 702, "unit": "W"}, "gfx_voltage": "N/A", "soc_voltage": "N/A",
                 "mem_voltage": "N/A", "throttle_status": "UNTHROTTLED", "power_management": "ENABLED"},
       "clock": {"gfx_0": {"clk": {"value": 2100, "unit": "MHz"}, "min_clk": {"value": 500, "unit": "MHz"}},
                 "gfx_1": {"clk": {"value": 2090, "unit": "MHz"}},
                 "mem_0": {"clk": {"value": 1300, "unit": "MHz"}}},
       "temperature": {"edge": "N/A", "hotspot": {"value": 71, "unit": "C"}, "mem": {"value": 58, "unit": "C"}},
       "energy": {"total_energy_consumption": {"value": 9876543.21, "unit": "J"}},
       "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "used_vram": {"value": 180000, "unit": "MB"}}},
      {"gpu": 1,
       "usage": {"gfx_activity": {"value": 0, "unit": "%"}},
       "power": {"socket_power": {"value": 140, "unit": "W"}},
       "temperature": {"edge": "N/A", "hotspot": {"value": 40, "unit": "C"}, "mem": {"value": 35, "unit": "C"}},
       "energy": {"total_energy_consumption": {"value": 1000.5, "unit": "J"}},
       "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "used_vram": {"value": 283, "unit": "MB"}}}
    ]"#;

    /// amd-smi of ROCm 6.4/7.x: the list wrapped in "gpu_data"; this build
    /// also lists current and average socket power, MI300-style (average N/A).
    const NEW: &str = r#"{"gpu_data": [
      {"gpu": 3,
       "power": {"socket_power": {"value": 655, "unit": "W"},
                 "current_socket_power": {"value": 655, "unit": "W"},
                 "average_socket_power": "N/A"},
       "usage": {"gfx_activity": {"value": 100, "unit": "%"}},
       "temperature": {"edge": "N/A", "hotspot": {"value": 80, "unit": "C"}, "mem": {"value": 66, "unit": "C"}},
       "energy": {"total_energy_consumption": {"value": 4321000, "unit": "uJ"}},
       "mem_usage": {"total_vram": {"value": 192, "unit": "GB"}, "used_vram": {"value": 2048, "unit": "MB"}}}
    ]}"#;

    #[test]
    fn amd_smi_old_layout() {
        let r = parse_amd_smi_metric(OLD).unwrap();
        assert_eq!(r.len(), 2);
        let g = &r[0];
        assert_eq!(g.gpu, 0);
        assert_eq!(g.power_w, Some(212.0));
        assert_eq!(g.util_pct, Some(87.0));
        assert_eq!(g.mem_util_pct, None);
        assert_eq!(g.gfx_clock_mhz, Some(1700.0));
        assert_eq!(g.mem_clock_mhz, Some(1300.0));
        assert_eq!((g.temp_c, g.temp_hotspot_c, g.temp_mem_c), (Some(45.0), Some(52.0), None));
        assert_eq!(g.energy_j, Some(123456.789));
        assert_eq!(g.mem_total_bytes, Some(65520 * 1024 * 1024));
        assert_eq!(g.mem_used_bytes, Some(1024 * 1024 * 1024));
        // Every reading N/A.
        let n = &r[1];
        assert_eq!(n.gpu, 1);
        assert_eq!(*n, GpuReading { gpu: 1, ..Default::default() });
    }

    #[test]
    fn amd_smi_units_layout_two_mi300() {
        let r = parse_amd_smi_metric(MID).unwrap();
        assert_eq!(r.iter().map(|g| g.gpu).collect::<Vec<_>>(), vec![0, 1]);
        let g = &r[0];
        assert_eq!(g.power_w, Some(702.0));
        assert_eq!(g.power_avg_w, None);
        assert_eq!(g.util_pct, Some(99.0));
        assert_eq!(g.mem_util_pct, Some(41.0));
        assert_eq!(g.gfx_clock_mhz, Some(2100.0));
        assert_eq!(g.mem_clock_mhz, Some(1300.0));
        assert_eq!((g.temp_c, g.temp_hotspot_c, g.temp_mem_c), (None, Some(71.0), Some(58.0)));
        assert_eq!(g.energy_j, Some(9876543.21));
        assert_eq!(g.mem_used_bytes, Some(180000 * 1024 * 1024));
        assert_eq!(r[1].power_w, Some(140.0));
        assert_eq!(r[1].util_pct, Some(0.0));
    }

    #[test]
    fn amd_smi_gpu_data_layout_current_vs_average() {
        let r = parse_amd_smi_metric(NEW).unwrap();
        assert_eq!(r.len(), 1);
        let g = &r[0];
        assert_eq!(g.gpu, 3);
        assert_eq!(g.power_w, Some(655.0), "MI300: the current socket power is the valid one");
        assert_eq!(g.power_avg_w, None);
        assert!((g.energy_j.unwrap() - 4.321).abs() < 1e-9);
        assert_eq!(g.mem_total_bytes, Some(192 * 1024 * 1024 * 1024));
        assert_eq!(g.mem_used_bytes, Some(2048 * 1024 * 1024));
        // Average valid, current N/A (MI200 and earlier): the average is used.
        let mi200 = r#"[{"gpu":0,"power":{"current_socket_power":"N/A","average_socket_power":{"value":300,"unit":"W"},"socket_power":"N/A"}}]"#;
        let g = &parse_amd_smi_metric(mi200).unwrap()[0];
        assert_eq!((g.power_w, g.power_avg_w), (Some(300.0), Some(300.0)));
        // UINT16_MAX is the library's "unsupported".
        let max = r#"[{"gpu":0,"power":{"socket_power":{"value":65535,"unit":"W"}}}]"#;
        assert_eq!(parse_amd_smi_metric(max).unwrap()[0].power_w, None);
    }

    #[test]
    fn amd_smi_bad_documents() {
        assert!(parse_amd_smi_metric("not json").is_err());
        assert!(parse_amd_smi_metric("{}").is_err());
        assert!(parse_amd_smi_metric("[]").is_err());
    }

    /// rocm-smi --showpower --showtemp --showuse --showmeminfo vram
    /// --showclocks --showenergycounter --json, two MI300X cards (card1 has
    /// the MI300 current power, the average N/A) and the "system" entry.
    const ROCM: &str = r#"{
      "card1": {"Temperature (Sensor edge) (C)": "N/A", "Temperature (Sensor junction) (C)": "63.0",
                "Temperature (Sensor memory) (C)": "51.0",
                "Current Socket Graphics Package Power (W)": "612.0", "Average Graphics Package Power (W)": "N/A",
                "GPU use (%)": "97", "GPU memory use (%)": "38",
                "VRAM Total Memory (B)": "206141652992", "VRAM Total Used Memory (B)": "194088558592",
                "sclk clock speed:": "(2100Mhz)", "mclk clock speed:": "(1300Mhz)",
                "Energy counter": "62929744071539", "Accumulated Energy (uJ)": "962825096297442.9"},
      "card0": {"Temperature (Sensor edge) (C)": "35.0", "Temperature (Sensor junction) (C)": "40.0",
                "Average Graphics Package Power (W)": "1.0",
                "GPU use (%)": 0, "VRAM Total Memory (B)": 206141652992, "VRAM Total Used Memory (B)": 10000},
      "system": {"Driver version": "6.8.5"}
    }"#;

    #[test]
    fn rocm_smi_cards() {
        let r = parse_rocm_smi(ROCM).unwrap();
        assert_eq!(r.iter().map(|g| g.gpu).collect::<Vec<_>>(), vec![0, 1]);
        let g = &r[1];
        assert_eq!(g.power_w, Some(612.0));
        assert_eq!(g.power_avg_w, None);
        assert_eq!((g.temp_c, g.temp_hotspot_c, g.temp_mem_c), (None, Some(63.0), Some(51.0)));
        assert_eq!((g.util_pct, g.mem_util_pct), (Some(97.0), Some(38.0)));
        assert_eq!((g.gfx_clock_mhz, g.mem_clock_mhz), (Some(2100.0), Some(1300.0)));
        assert_eq!(g.mem_total_bytes, Some(206141652992));
        assert!((g.energy_j.unwrap() - 962825096.2974429).abs() < 1e-3);
        let g = &r[0];
        assert_eq!(g.power_w, Some(1.0));
        assert_eq!(g.util_pct, Some(0.0));
        assert_eq!(g.mem_used_bytes, Some(10000));
        assert!(parse_rocm_smi(r#"{"system": {}}"#).is_err());
    }

    #[test]
    fn value_forms() {
        use serde_json::json;
        assert_eq!(value_with_unit(&json!(5)), Some((5.0, None)));
        assert_eq!(value_with_unit(&json!("5.5 W")), Some((5.5, Some("W".into()))));
        assert_eq!(value_with_unit(&json!("(900Mhz)")), Some((900.0, Some("Mhz".into()))));
        assert_eq!(value_with_unit(&json!({"value": "N/A", "unit": "W"})), None);
        assert_eq!(value_with_unit(&json!("N/A")), None);
        assert_eq!(value_with_unit(&json!(null)), None);
        assert_eq!(value_with_unit(&json!("ENABLED")), None);
    }
}
