//! `floe maintain`: one pass of policy-driven maintenance, or a service (`--watch`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::maintenance::{Lease, MaintainOptions, MaintainReport};
use floe::{Error, ErrorKind, Result};

use super::output::print_json;
use super::{catalog_and_table, spinner, Cli};

/// Arguments of `floe maintain`.
#[derive(clap::Args, Debug)]
pub struct MaintainArgs {
    /// Table name.
    pub name: String,
    /// Print what would be done and the numbers behind each decision; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run as a service: a pass now and then every INTERVAL (e.g. 30s, 5m, 1h) until
    /// SIGTERM or Ctrl-C; waits while another maintainer holds the table's lease.
    #[arg(long, value_name = "INTERVAL", value_parser = parse_duration)]
    pub watch: Option<Duration>,
    /// With --watch: also start a pass as soon as N commits have landed since the last one
    /// (the table is looked at every second), whichever of the two comes first.
    #[arg(long, value_name = "N", requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    pub after_commits: Option<u64>,
    /// Compact at most this many bytes of data files per pass (e.g. 10GB, 512MiB).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_rewrite_bytes: Option<u64>,
    /// The name this maintainer holds the lease under (default host:pid).
    #[arg(long)]
    pub holder: Option<String>,
    /// Print each pass's report as JSON (one document per line with --watch).
    #[arg(long)]
    pub json: bool,
}

/// A duration: a number with `ms`, `s`, `m` or `h` (plain numbers are seconds).
pub(crate) fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("'{s}' is not a duration such as 30s, 5m or 1h"))?;
    let ms = match unit.trim() {
        "ms" => n,
        "" | "s" => n * 1000,
        "m" | "min" => n * 60_000,
        "h" => n * 3_600_000,
        u => return Err(format!("'{s}': unknown unit '{u}'; use ms, s, m or h")),
    };
    if ms == 0 {
        return Err("the interval must be more than 0".into());
    }
    Ok(Duration::from_millis(ms))
}

/// A byte count: a number with an optional unit (KB, MB, GB, TB in powers of 1000; KiB, MiB,
/// GiB, TiB in powers of 1024).
fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: f64 = n
        .parse()
        .map_err(|_| format!("'{s}' is not a size such as 512MiB or 10GB"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "'{s}': unknown unit '{u}'; use KB, MB, GB, KiB, MiB or GiB"
            ))
        }
    };
    Ok((n * mult) as u64)
}

fn options(a: &MaintainArgs, stop: &Arc<AtomicBool>) -> MaintainOptions {
    let mut o = MaintainOptions::default()
        .with_dry_run(a.dry_run)
        .with_stop(stop.clone());
    if let Some(b) = a.max_rewrite_bytes {
        o = o.with_max_rewrite_bytes(b);
    }
    if let Some(h) = &a.holder {
        o = o.with_holder(h.clone());
    }
    o
}

/// Sets `stop` on the first SIGTERM or Ctrl-C (SIGINT).
pub(crate) fn on_signals(stop: Arc<AtomicBool>) -> Result<tokio::sync::watch::Receiver<bool>> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = tokio::sync::watch::channel(false);
    let io =
        |e: std::io::Error| Error::new(ErrorKind::Io, format!("installing signal handlers: {e}"));
    let mut term = signal(SignalKind::terminate()).map_err(io)?;
    let mut int = signal(SignalKind::interrupt()).map_err(io)?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        stop.store(true, Ordering::Relaxed);
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// How far a table's history has come: its last sequence number (v2 and later) or its
/// newest snapshot's timestamp (v1, whose snapshots carry no sequence number).
fn history_mark(t: &floe::Table) -> (i64, i64) {
    let m = t.metadata();
    let newest = m.snapshots().map(|s| s.timestamp_ms()).max().unwrap_or(0);
    (m.last_sequence_number(), newest)
}

/// Commits that landed on `t` after `mark`.
fn commits_since(t: &floe::Table, mark: (i64, i64)) -> u64 {
    let m = t.metadata();
    if m.format_version() == floe::spec::FormatVersion::V1 {
        m.snapshots().filter(|s| s.timestamp_ms() > mark.1).count() as u64
    } else {
        (m.last_sequence_number() - mark.0).max(0) as u64
    }
}

/// Sleeps until the next pass of `--watch` is due: after `interval`, or once `after_commits`
/// commits have landed since now (looked at every second), or on SIGTERM / Ctrl-C.
async fn wait_for_next_pass(
    cat: &floe::catalog::Catalog,
    table: &floe::Table,
    interval: Duration,
    after_commits: Option<u64>,
    stop: &AtomicBool,
    stopped: &mut tokio::sync::watch::Receiver<bool>,
) {
    let deadline = Instant::now() + interval;
    // The mark is taken after the pass, so maintenance's own commits do not count.
    let mark = match cat.load_table(table.ident()).await {
        Ok(t) => history_mark(&t),
        Err(_) => history_mark(table),
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stop.load(Ordering::Relaxed) {
            return;
        }
        let nap = match after_commits {
            Some(_) => left.min(Duration::from_secs(1)),
            None => left,
        };
        tokio::select! {
            _ = tokio::time::sleep(nap) => {}
            _ = stopped.changed() => return,
        }
        if let Some(n) = after_commits {
            // A failed look (the catalog briefly unreachable) waits for the next one.
            if let Ok(t) = cat.load_table(table.ident()).await {
                if commits_since(&t, mark) >= n {
                    return;
                }
            }
        }
    }
}

/// Prints a pass's report: text, or JSON (with `one_line`, one document per line, as a
/// service's log wants them).
fn print(report: &MaintainReport, started: Instant, json: bool, one_line: bool) {
    if json {
        let mut v = serde_json::to_value(report).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "elapsed_ms".into(),
                (started.elapsed().as_millis() as u64).into(),
            );
        }
        if one_line {
            outln!("{v}");
        } else {
            print_json(&v);
        }
        return;
    }
    for s in &report.steps {
        let counts: Vec<String> = s.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        outln!(
            "{:<30} {:<8} {}{}{}",
            s.step,
            s.action,
            s.reason,
            if counts.is_empty() {
                String::new()
            } else {
                format!(" [{}]", counts.join(", "))
            },
            s.error
                .as_deref()
                .map(|e| format!("\n{:<39} error: {e}", ""))
                .unwrap_or_default()
        );
    }
    outln!(
        "{}: {} {} commits, {} failed steps in {:.1} s",
        report.table,
        if report.dry_run {
            "dry run,"
        } else {
            "maintained:"
        },
        report.commits,
        report.failed_steps,
        started.elapsed().as_secs_f64()
    );
}

/// `floe maintain`.
pub async fn maintain(cli: &Cli, a: &MaintainArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut stopped = on_signals(stop.clone())?;
    let (cat, table) = catalog_and_table(cli, &a.name).await?;
    let Some(interval) = a.watch else {
        let started = Instant::now();
        let pb = spinner("maintaining", a.json);
        let r = floe::maintenance::maintain(&cat, &table, &options(a, &stop)).await;
        pb.finish_and_clear();
        let r = r?;
        print(&r, started, a.json, false);
        if stop.load(Ordering::Relaxed) {
            eprintln!("interrupted: the steps committed above stay; the rest did not run");
            return Err(Error::new(ErrorKind::Conflict, "maintain was interrupted"));
        }
        if let Some(f) = r.steps.iter().find(|s| s.action == "failed") {
            return Err(Error::new(
                f.error_kind.unwrap_or(ErrorKind::Conflict),
                format!(
                    "{}: {} maintenance steps failed, first {} (see above); the next run \
                     tries them again",
                    a.name, r.failed_steps, f.step
                ),
            ));
        }
        return Ok(());
    };
    if a.dry_run {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "--dry-run and --watch do not go together: a dry run is one pass",
        ));
    }
    let holder = a
        .holder
        .clone()
        .unwrap_or_else(floe::maintenance::default_holder);
    let ttl =
        floe::spec::maintain_policy::MaintainPolicy::of(table.metadata().properties())?.lease_ms;
    let (mut passes, mut commits, mut failed) = (0u64, 0usize, 0usize);
    let mut lease: Option<Lease> = None;
    let mut waiting_said = false;
    while !stop.load(Ordering::Relaxed) {
        let table = cat.load_table(table.ident()).await?;
        if lease.is_none() {
            match Lease::acquire(&table, &holder, ttl).await {
                Ok(l) => {
                    eprintln!(
                        "maintain: holding the lease of {} (generation {}) as {holder}",
                        a.name,
                        l.holder().generation
                    );
                    lease = Some(l);
                    waiting_said = false;
                }
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    if !waiting_said {
                        eprintln!("maintain: waiting: {e}");
                        waiting_said = true;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(l) = lease.as_mut() {
            let started = Instant::now();
            match floe::maintenance::maintain_with_lease(&cat, &table, &options(a, &stop), l).await
            {
                Ok(r) => {
                    passes += 1;
                    commits += r.commits;
                    failed += r.failed_steps;
                    print(&r, started, a.json, true);
                }
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    eprintln!("maintain: {e}");
                    lease = None;
                }
                Err(e) => {
                    if let Some(l) = lease.take() {
                        let _ = l.release().await;
                    }
                    return Err(e);
                }
            }
        }
        wait_for_next_pass(&cat, &table, interval, a.after_commits, &stop, &mut stopped).await;
    }
    if let Some(l) = lease.take() {
        l.release().await?;
    }
    eprintln!(
        "maintain: stopped after {passes} passes: {commits} commits, {failed} failed steps; lease released"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_duration};
    use std::time::Duration;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("0s").is_err() && parse_duration("5 days").is_err());
        assert_eq!(parse_bytes("10GB"), Ok(10_000_000_000));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert!(parse_bytes("lots").is_err() && parse_bytes("1 parsec").is_err());
    }
}
