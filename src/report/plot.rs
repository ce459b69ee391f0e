//! Charts (plotters; PNG and SVG), per ISL/OSL:
//!
//! * throughput per GPU (tok/s/gpu, InferenceX `tput_per_gpu`) against
//!   interactivity (tok/s/user = 1000 / median TPOT in ms, the points'
//!   `median_intvty`): the Pareto chart InferenceX publishes;
//! * throughput per GPU against concurrency, and median TPOT (ms) against
//!   concurrency, on a log2 concurrency axis.
//!
//! One curve per job label of a run (and, for `ab`, per variant and TP
//! size, from `ab`'s comparison), labelled in a legend; a point may carry
//! interval bars (`ab`'s candidate: the 95% interval of the change). Text is drawn
//! with a bundled subset of DejaVu Sans (`font/`, Bitstream Vera license),
//! so no system font library is needed.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::result::RunResult;

static FONT: &[u8] = include_bytes!("font/DejaVuSans-subset.ttf");

/// Registers the bundled font as "sans-serif" (once).
fn ensure_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            tracing::warn!("the bundled plot font did not load: plots will have no text");
        }
    });
}

/// One point of a curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlotPoint {
    /// Concurrency (requests in flight).
    pub conc: u32,
    /// Total tok/s per GPU.
    pub tput_per_gpu: f64,
    /// 1000 / median TPOT (ms), tok/s/user.
    pub intvty: f64,
    /// Median TPOT, ms.
    pub tpot_ms: f64,
    /// An interval to draw as a bar around the point, tok/s/gpu (`ab`: the
    /// 95% interval of the change on the candidate's point; `None`: no bar).
    pub tput_range: Option<(f64, f64)>,
    /// The same for the median TPOT, ms (drawn on the TPOT chart, and as
    /// interactivity, 1000 / TPOT, across the Pareto chart).
    pub tpot_range: Option<(f64, f64)>,
}

/// One curve: a variant (and TP) at one ISL/OSL, points by concurrency.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<PlotPoint>,
}

/// Everything drawn for one ISL/OSL.
#[derive(Debug, Clone, PartialEq)]
pub struct Charts {
    pub isl: u32,
    pub osl: u32,
    pub series: Vec<Series>,
}

/// Which chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// tok/s/gpu against tok/s/user.
    Pareto,
    /// tok/s/gpu against concurrency (log2).
    TputVsConc,
    /// median TPOT (ms) against concurrency (log2).
    TpotVsConc,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Pareto, Kind::TputVsConc, Kind::TpotVsConc];

    fn stem(self) -> &'static str {
        match self {
            Kind::Pareto => "tput_vs_intvty",
            Kind::TputVsConc => "tput_vs_conc",
            Kind::TpotVsConc => "tpot_vs_conc",
        }
    }

    /// (caption, x axis label, y axis label).
    pub fn labels(self) -> (&'static str, &'static str, &'static str) {
        const TPUT: &str = "Throughput per GPU (tok/s/gpu)";
        const CONC: &str = "Concurrency (requests in flight, log2 scale)";
        match self {
            Kind::Pareto => (
                "Throughput per GPU vs interactivity",
                "Interactivity (tok/s/user = 1000 / median TPOT ms)",
                TPUT,
            ),
            Kind::TputVsConc => ("Throughput per GPU vs concurrency", CONC, TPUT),
            Kind::TpotVsConc => ("Median TPOT vs concurrency", CONC, "Median TPOT (ms)"),
        }
    }
}

/// The charts of one result: per ISL/OSL, one curve per job label (jobs
/// that share a label, i.e. repeats, are averaged per concurrency).
pub fn from_result(result: &RunResult) -> Vec<Charts> {
    use std::collections::BTreeMap;
    // Sums of tok/s/gpu, intvty, TPOT ms and the count, by conc.
    type Sums = BTreeMap<u32, (f64, f64, f64, usize)>;
    // (isl, osl) -> (label, sums) in job order
    let mut groups: BTreeMap<(u32, u32), Vec<(String, Sums)>> = BTreeMap::new();
    for job in &result.jobs {
        for p in &job.points {
            let list = groups.entry((p.isl, p.osl)).or_default();
            let idx = match list.iter().position(|(l, _)| *l == job.label) {
                Some(i) => i,
                None => {
                    list.push((job.label.clone(), BTreeMap::new()));
                    list.len() - 1
                }
            };
            let e = list[idx].1.entry(p.conc).or_insert((0.0, 0.0, 0.0, 0));
            e.0 += p.figures.tput_per_gpu;
            e.1 += p.figures.ms("median_intvty");
            e.2 += p.figures.ms("median_tpot_ms");
            e.3 += 1;
        }
    }
    groups
        .into_iter()
        .map(|((isl, osl), list)| Charts {
            isl,
            osl,
            series: list
                .into_iter()
                .map(|(label, by_conc)| Series {
                    label,
                    points: by_conc
                        .into_iter()
                        .map(|(conc, (t, i, m, n))| {
                            let n = n as f64;
                            PlotPoint { conc, tput_per_gpu: t / n, intvty: i / n, tpot_ms: m / n, tput_range: None, tpot_range: None }
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

/// matplotlib's tab10 colours: blue for the first curve (the baseline), orange for the second.
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Pixel size of every chart.
pub const SIZE: (u32, u32) = (1100, 700);

/// An axis tick: at most 2 decimals, trailing zeros dropped (`300`, `15.5`, `0.25`).
fn tick(v: &f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.to_string() }
}

/// Draws one chart onto any plotters backend (files, or a buffer in tests).
pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, charts: &Charts, kind: Kind) -> Result<()> {
    ensure_font();
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("plot: {e}");
    root.fill(&WHITE).map_err(err)?;
    let (caption, x_label, y_label) = kind.labels();
    let caption = format!("{caption}, ISL/OSL {}/{}", charts.isl, charts.osl);
    let y_of = |p: &PlotPoint| match kind {
        Kind::Pareto | Kind::TputVsConc => p.tput_per_gpu,
        Kind::TpotVsConc => p.tpot_ms,
    };
    let x_of = |p: &PlotPoint| match kind {
        Kind::Pareto => p.intvty,
        _ => f64::from(p.conc.max(1)).log2(),
    };
    // A point's bars as (x range, y range), where it has them.
    let bars_of = |p: &PlotPoint| -> (Option<(f64, f64)>, Option<(f64, f64)>) {
        let intvty = |(lo, hi): (f64, f64)| (1000.0 / hi.max(f64::MIN_POSITIVE), 1000.0 / lo.max(f64::MIN_POSITIVE));
        match kind {
            Kind::Pareto => (p.tpot_range.map(intvty), p.tput_range),
            Kind::TputVsConc => (None, p.tput_range),
            Kind::TpotVsConc => (None, p.tpot_range),
        }
    };
    let points: Vec<&PlotPoint> =
        charts.series.iter().flat_map(|s| &s.points).filter(|p| x_of(p).is_finite() && y_of(p).is_finite()).collect();
    let y_points = points.iter().map(|p| y_of(p)).fold(0.0f64, f64::max);
    // A bar may reach past the points, up to twice their top (then it is cut at the frame).
    let y_bars = points.iter().filter_map(|p| bars_of(p).1).map(|(_, hi)| hi.min(2.0 * y_points)).fold(0.0f64, f64::max);
    let y_max = y_points.max(y_bars);
    let y_max = if y_max > 0.0 { y_max * 1.12 } else { 1.0 };
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(caption, ("sans-serif", 26))
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(90);
    let series_style = |i: usize| COLOURS[i % COLOURS.len()];
    let xs = points.iter().map(|p| x_of(p));
    let x_lo = xs.clone().fold(f64::INFINITY, f64::min);
    let x_hi = xs.fold(f64::NEG_INFINITY, f64::max);
    // x range, legend corner, and the concurrency charts' tick count.
    let (x_range, legend_at, conc_ticks) = match kind {
        // From 0, unless every point sits in the upper half (then zoom in).
        Kind::Pareto if x_hi <= 0.0 || !x_hi.is_finite() => (0.0..1.0, SeriesLabelPosition::UpperRight, 0),
        Kind::Pareto if x_lo > 0.5 * x_hi => {
            let pad = 0.15 * (x_hi - x_lo).max(0.1 * x_hi);
            ((x_lo - pad)..(x_hi + pad), SeriesLabelPosition::UpperRight, 0)
        }
        Kind::Pareto => (0.0..(x_hi * 1.12), SeriesLabelPosition::UpperRight, 0),
        // x is log2(conc): a tick at each whole power of two, a quarter step of margin.
        Kind::TputVsConc | Kind::TpotVsConc => {
            let (lo, hi) = if x_lo.is_finite() { (x_lo.floor(), x_hi.ceil().max(x_lo.floor() + 1.0)) } else { (0.0, 1.0) };
            ((lo - 0.25)..(hi + 0.25), SeriesLabelPosition::UpperLeft, (hi - lo) as usize + 1)
        }
    };
    // Concurrency tick labels: the concurrency at whole powers of two.
    let conc_label = |x: &f64| {
        if (x - x.round()).abs() < 1e-6 { format!("{}", 2f64.powf(x.round())) } else { String::new() }
    };
    let mut chart = builder.build_cartesian_2d(x_range, 0.0..y_max).map_err(err)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_label)
        .y_desc(y_label)
        .y_label_formatter(&tick)
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 14))
        .light_line_style(RGBColor(242, 242, 242));
    match kind {
        Kind::Pareto => mesh.x_label_formatter(&tick),
        Kind::TputVsConc | Kind::TpotVsConc => mesh.x_labels(conc_ticks).x_label_formatter(&conc_label),
    };
    mesh.draw().map_err(err)?;
    for (i, s) in charts.series.iter().enumerate() {
        let colour = series_style(i);
        let xy: Vec<(f64, f64)> = s.points.iter().map(|p| (x_of(p), y_of(p))).filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
        chart
            .draw_series(LineSeries::new(xy.clone(), colour.stroke_width(2)))
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], colour.stroke_width(3)));
        chart.draw_series(xy.iter().map(|&(x, y)| Circle::new((x, y), 5, colour.filled()))).map_err(err)?;
        // Interval bars, cut at the frame: a vertical one (y) and, on the Pareto chart, a horizontal one (x).
        let (x_axis, y_axis) = (chart.x_range(), chart.y_range());
        let clamp = |v: f64, r: &std::ops::Range<f64>| if v.is_nan() { r.end } else { v.clamp(r.start, r.end) };
        let mut bars = Vec::new();
        for p in s.points.iter().filter(|p| x_of(p).is_finite() && y_of(p).is_finite()) {
            let (xb, yb) = bars_of(p);
            let (x, y) = (x_of(p), y_of(p));
            if let Some((lo, hi)) = yb {
                bars.push(vec![(x, clamp(lo, &y_axis)), (x, clamp(hi, &y_axis))]);
            }
            if let Some((lo, hi)) = xb {
                bars.push(vec![(clamp(lo, &x_axis), y), (clamp(hi, &x_axis), y)]);
            }
        }
        chart.draw_series(bars.into_iter().map(|b| PathElement::new(b, colour.stroke_width(2)))).map_err(err)?;
        if kind == Kind::Pareto {
            // "conc N" beside each marker, offset in pixels: the Pareto x axis is not the concurrency.
            let font = ("sans-serif", 13).into_font().color(&colour);
            chart
                .draw_series(s.points.iter().filter(|p| x_of(p).is_finite() && y_of(p).is_finite()).map(|p| {
                    EmptyElement::at((x_of(p), y_of(p))) + Text::new(format!("conc {}", p.conc), (9, -4), font.clone())
                }))
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .position(legend_at)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Writes every chart as PNG and SVG into `dir`, named
/// `{prefix}{tput_vs_intvty|tput_vs_conc|tpot_vs_conc}_isl{ISL}_osl{OSL}.{png,svg}`.
/// Returns the files written.
pub fn write_all(charts: &[Charts], dir: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| crate::error::usage(format!("cannot create {}: {e}", dir.display())))?;
    let mut files = Vec::new();
    for ch in charts {
        for kind in Kind::ALL {
            let stem = format!("{prefix}{}_isl{}_osl{}", kind.stem(), ch.isl, ch.osl);
            let png = dir.join(format!("{stem}.png"));
            draw(&BitMapBackend::new(&png, SIZE).into_drawing_area(), ch, kind)?;
            files.push(png);
            let svg = dir.join(format!("{stem}.svg"));
            draw(&SVGBackend::new(&svg, SIZE).into_drawing_area(), ch, kind)?;
            files.push(svg);
        }
    }
    Ok(files)
}

/// `enginebench plot`: every job of one result, PNG and SVG per ISL/OSL,
/// into `output` (default: beside the result). Returns the files written.
pub fn run_plot(result: &Path, output: Option<&Path>) -> Result<Vec<PathBuf>> {
    let r = super::export::read_result(result)?;
    let charts = from_result(&r);
    if charts.is_empty() {
        return Err(crate::error::usage(format!("{}: no measured point to plot", result.display())));
    }
    let dir = output.map(Path::to_path_buf).unwrap_or_else(|| result.parent().map(Path::to_path_buf).unwrap_or_default());
    write_all(&charts, &dir, "")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn two_curves() -> Charts {
        let pt = |conc: u32, tput: f64, tpot: f64| PlotPoint { conc, tput_per_gpu: tput, intvty: 1000.0 / tpot, tpot_ms: tpot, tput_range: None, tpot_range: None };
        Charts {
            isl: 64,
            osl: 16,
            series: vec![
                Series { label: "base".into(), points: vec![pt(1, 75.0, 61.0), pt(4, 260.0, 63.0), pt(16, 600.0, 110.0)] },
                Series { label: "knob".into(), points: vec![pt(1, 87.0, 53.0), pt(4, 284.0, 57.5), pt(16, 650.0, 100.0)] },
            ],
        }
    }

    /// Reads a PNG's RGB pixels back with flate2 (8-bit RGB, no interlace,
    /// as plotters writes): checks the signature, IHDR, and undoes the
    /// per-row filters.
    pub fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        use std::io::Read;
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        let mut pos = 8;
        let (mut w, mut h, mut idat) = (0u32, 0u32, Vec::new());
        while pos + 8 <= bytes.len() {
            let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
            let kind = &bytes[pos + 4..pos + 8];
            let data = &bytes[pos + 8..pos + 8 + len];
            match kind {
                b"IHDR" => {
                    w = u32::from_be_bytes(data[0..4].try_into().unwrap());
                    h = u32::from_be_bytes(data[4..8].try_into().unwrap());
                    assert_eq!((data[8], data[9], data[12]), (8, 2, 0), "8-bit RGB, not interlaced");
                }
                b"IDAT" => idat.extend_from_slice(data),
                _ => {}
            }
            pos += 12 + len;
        }
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut raw).unwrap();
        let stride = w as usize * 3;
        assert_eq!(raw.len(), h as usize * (stride + 1));
        let mut out = vec![0u8; h as usize * stride];
        for y in 0..h as usize {
            let filter = raw[y * (stride + 1)];
            let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
            for x in 0..stride {
                let a = if x >= 3 { out[y * stride + x - 3] } else { 0 };
                let b = if y > 0 { out[(y - 1) * stride + x] } else { 0 };
                let c = if x >= 3 && y > 0 { out[(y - 1) * stride + x - 3] } else { 0 };
                let pred = match filter {
                    0 => 0,
                    1 => a,
                    2 => b,
                    3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                    4 => {
                        let p = i16::from(a) + i16::from(b) - i16::from(c);
                        let (pa, pb, pc) = ((p - i16::from(a)).abs(), (p - i16::from(b)).abs(), (p - i16::from(c)).abs());
                        if pa <= pb && pa <= pc { a } else if pb <= pc { b } else { c }
                    }
                    f => panic!("bad PNG filter {f}"),
                };
                out[y * stride + x] = line[x].wrapping_add(pred);
            }
        }
        (w, h, out)
    }

    fn count_colour(rgb: &[u8], c: RGBColor) -> usize {
        rgb.chunks(3).filter(|p| p[0] == c.0 && p[1] == c.1 && p[2] == c.2).count()
    }

    #[test]
    fn png_files_are_valid_and_show_both_curves_and_text() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_all(&[two_curves()], dir.path(), "ab_").unwrap();
        let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(
            names,
            [
                "ab_tput_vs_intvty_isl64_osl16.png",
                "ab_tput_vs_intvty_isl64_osl16.svg",
                "ab_tput_vs_conc_isl64_osl16.png",
                "ab_tput_vs_conc_isl64_osl16.svg",
                "ab_tpot_vs_conc_isl64_osl16.png",
                "ab_tpot_vs_conc_isl64_osl16.svg"
            ]
        );
        for f in files.iter().filter(|f| f.extension().unwrap() == "png") {
            let (w, h, rgb) = decode_png(&std::fs::read(f).unwrap());
            assert_eq!((w, h), SIZE);
            let white = count_colour(&rgb, WHITE);
            let total = (w * h) as usize;
            assert!(white < total, "{}: blank", f.display());
            // Both curves are drawn in their colours.
            assert!(count_colour(&rgb, COLOURS[0]) > 200, "{}: no baseline curve", f.display());
            assert!(count_colour(&rgb, COLOURS[1]) > 200, "{}: no candidate curve", f.display());
            // Text (the font rasterises anti-aliased grey pixels): something
            // dark in the caption band above the plot.
            let dark_in_caption = (0..40usize * w as usize)
                .filter(|&i| rgb[i * 3] < 100 && rgb[i * 3 + 1] < 100 && rgb[i * 3 + 2] < 100)
                .count();
            assert!(dark_in_caption > 100, "{}: no caption text", f.display());
        }
    }

    /// The text of every `<text>` element of an SVG, trimmed.
    pub fn svg_texts(svg: &str) -> Vec<String> {
        svg.split("<text").skip(1).filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim().to_string())).collect()
    }

    #[test]
    fn svg_files_are_xml_with_axis_labels_and_legend() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_all(&[two_curves()], dir.path(), "").unwrap();
        for f in files.iter().filter(|f| f.extension().unwrap() == "svg") {
            let text = std::fs::read_to_string(f).unwrap();
            assert!(text.trim_start().starts_with("<svg"), "{}", f.display());
            assert!(text.trim_end().ends_with("</svg>"));
            let kind = Kind::ALL.into_iter().find(|k| f.to_string_lossy().contains(k.stem())).unwrap();
            let (_, x, y) = kind.labels();
            let texts = svg_texts(&text);
            let has = |s: &str| texts.iter().any(|t| t == s);
            assert!(has(x), "{}: no x label in {texts:?}", f.display());
            assert!(has(y), "{}: no y label", f.display());
            assert!(has("base") && has("knob"), "{}: no legend", f.display());
            // Well-formed enough: every opened element is closed.
            let opens = text.matches("<text").count();
            assert_eq!(opens, text.matches("</text>").count());
        }
    }

    #[test]
    fn ticks() {
        assert_eq!([tick(&300.0), tick(&15.5), tick(&0.25), tick(&0.0), tick(&16.000000001)], ["300", "15.5", "0.25", "0", "16"]);
    }

    #[test]
    fn the_bundled_font_loads() {
        assert!(plotters::style::register_font("test-font", FontStyle::Normal, FONT).is_ok());
    }
}
