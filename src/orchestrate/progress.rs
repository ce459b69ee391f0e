//! Progress display: one bar at a time, replaced when the phase changes.

use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// One progress bar at a time, replaced when the phase changes.
pub struct Bar<'a> {
    ui: &'a MultiProgress,
    bar: Option<ProgressBar>,
    phase: String,
}

impl<'a> Bar<'a> {
    pub fn new(ui: &'a MultiProgress) -> Bar<'a> {
        Bar { ui, bar: None, phase: String::new() }
    }

    /// The phase of the current bar ("" when none).
    pub fn phase(&self) -> &str {
        &self.phase
    }

    pub fn spinner(&mut self, msg: &str) {
        self.clear();
        let b = self.ui.add(ProgressBar::new_spinner());
        b.set_style(ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("template"));
        b.set_message(msg.to_string());
        b.enable_steady_tick(Duration::from_millis(200));
        self.bar = Some(b);
    }

    pub fn progress(&mut self, phase: &str, done: u64, total: u64) {
        if self.phase != phase || self.bar.is_none() {
            self.clear();
            let b = self.ui.add(ProgressBar::new(total));
            b.set_style(
                ProgressStyle::with_template("{msg:>16} [{bar:30}] {pos}/{len} requests [{elapsed}, eta {eta}]")
                    .expect("template")
                    .progress_chars("=> "),
            );
            b.set_message(phase.to_string());
            self.bar = Some(b);
            self.phase = phase.to_string();
        }
        if let Some(b) = &self.bar {
            b.set_position(done);
        }
    }

    pub fn finish(&mut self, line: String) {
        self.clear();
        say(self.ui, &format!("  {line}"));
    }

    pub fn clear(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
            self.ui.remove(&b);
        }
        self.phase.clear();
    }
}


/// Prints a line above the bars; plain stderr when there is no terminal
/// (indicatif draws nothing then, and the line would be lost).
pub fn say(ui: &MultiProgress, line: &str) {
    if ui.is_hidden() {
        errln!("{line}");
    } else {
        let _ = ui.println(line);
    }
}
