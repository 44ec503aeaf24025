//! Progress bars on stderr for long work: a bar over the bytes of the files to read, with
//! files, rows and bytes written and an ETA, drawn only on a terminal and never with `--json`.
//! The command prints its one-line summary once the bar is cleared.

use std::future::Future;
use std::io::IsTerminal;
use std::time::Duration;

use floe::progress::{Progress, ProgressState};
use indicatif::{HumanBytes, HumanCount, ProgressBar, ProgressStyle};

/// Whether a bar would be drawn.
pub fn shown(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

fn message(label: &str, s: &ProgressState) -> String {
    let mut parts = vec![label.to_string()];
    if s.files_total > 0 {
        parts.push(format!(
            "{}/{} files",
            HumanCount(s.files_done),
            HumanCount(s.files_total)
        ));
    }
    if s.rows_read > 0 {
        parts.push(format!("{} rows read", HumanCount(s.rows_read)));
    }
    if s.rows_written > 0 || s.bytes_written > 0 {
        parts.push(format!(
            "{} rows, {} written",
            HumanCount(s.rows_written),
            HumanBytes(s.bytes_written)
        ));
    }
    parts.join(", ")
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// Runs `work` with fresh [`Progress`] counters (given to it, and current for every engine
/// it calls), drawing them until it ends.
pub async fn run<F, Fut>(label: &str, json: bool, work: F) -> Fut::Output
where
    F: FnOnce(Progress) -> Fut,
    Fut: Future,
{
    let progress = Progress::new();
    if !shown(json) {
        return progress.scope(work(progress.clone())).await;
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(spinner_style());
    pb.set_message(label.to_string());
    let (p, bar, label_owned) = (progress.clone(), pb.clone(), label.to_string());
    let ticker = tokio::spawn(async move {
        loop {
            draw(&bar, &label_owned, &p.state());
            bar.tick();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let out = progress.scope(work(progress.clone())).await;
    ticker.abort();
    // Work shorter than a tick still shows its last state once before the summary.
    draw(&pb, label, &progress.state());
    pb.force_draw();
    pb.finish_and_clear();
    out
}

/// Puts `s` on the bar: a spinner until the bytes to read are known, then a bar over them.
fn draw(bar: &ProgressBar, label: &str, s: &ProgressState) {
    if s.bytes_total > 0 {
        if bar.length().is_none() {
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg}\n[{bar:40}] {bytes}/{total_bytes} read ({bytes_per_sec}, ETA {eta})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
        }
        bar.set_length(s.bytes_total);
        bar.set_position(s.bytes_done.min(s.bytes_total));
    }
    bar.set_message(message(label, s));
}

/// A spinner for work that reads and writes no data files (expiry, orphan listing).
pub fn spinner(msg: &str, json: bool) -> ProgressBar {
    if !shown(json) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(spinner_style());
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_only_what_is_counted() {
        let mut s = ProgressState::default();
        assert_eq!(message("deleting", &s), "deleting");
        s.files_total = 4;
        s.files_done = 1;
        s.rows_read = 1_234_567;
        s.rows_written = 3;
        s.bytes_written = 2048;
        assert_eq!(
            message("deleting", &s),
            "deleting, 1/4 files, 1,234,567 rows read, 3 rows, 2.00 KiB written"
        );
    }
}
