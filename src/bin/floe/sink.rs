//! `floe sink`: a keyed table's CDC sink as one long-running process.
//!
//! Records arrive on standard input (one per line: Debezium JSON or JSON lines) or as files
//! in a directory (taken in name order). They are committed in batches (on an interval or a
//! row count) through one [`floe::keyed::KeyedWriter`], whose key index stays in memory, so
//! a commit costs its batch. Exactly once, across restarts:
//! - standard input: each record's source position (Debezium's `source.lsn`, or the
//!   `--position-field` of a JSON line) — a batch commits the highest as the sink's
//!   checkpoint, and a restarted sink skips the records at or below it (so a replay of the
//!   stream from an earlier offset applies nothing twice);
//! - a directory: the checkpoint counts the sink's commits; before a commit the batch's file
//!   names go to `<DIR>/.floe-sink-<id>/pending-<checkpoint>.json`, after it the files move to
//!   `<DIR>/.floe-sink-<id>/done/`. A restart finishes a pending batch the table holds (its
//!   checkpoint is committed) and redoes one it does not.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use floe::keyed::{KeyedWriter, UpsertResult};
use floe::{Error, ErrorKind, Result, Table};
use serde_json::Value;

use super::keyed::{read_changes, with_function_inputs, ChangeFormat};
use super::maintain::{on_signals, parse_duration};
use super::{catalog_and_table, Cli};

/// Arguments of `floe sink`.
#[derive(clap::Args, Debug)]
pub struct SinkArgs {
    /// Table name (a keyed table).
    pub name: String,
    /// Record format: debezium-json (default) or jsonl on standard input; in a directory,
    /// by each file's extension unless given.
    #[arg(long, value_enum)]
    pub format: Option<ChangeFormat>,
    /// Where records come from: `-` (standard input, default) or a directory whose files
    /// are taken in name order, each once (names starting with `.` or ending in `.tmp` or
    /// `.part` are left alone until renamed).
    #[arg(long, default_value = "-")]
    pub from: String,
    /// The sink's id: its checkpoint is the table property floe.sink.<id>.checkpoint.
    #[arg(long)]
    pub sink_id: String,
    /// Commit at least this often while records arrive (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub commit_interval: Duration,
    /// Commit once a batch holds this many records.
    #[arg(long, default_value_t = 100_000)]
    pub max_batch_rows: usize,
    /// JSON lines: the field holding each record's source position (a Kafka offset, an
    /// LSN): the checkpoint that makes a restart exactly-once.
    #[arg(long)]
    pub position_field: Option<String>,
    /// Send records (standard input: a JSON line each, with the error) or files (a
    /// directory: moved there with a .error.txt) that cannot be read here instead of
    /// stopping the sink.
    #[arg(long, value_name = "PATH")]
    pub dead_letter: Option<String>,
    /// Run `maintain` (the table's policy) in this process between commits, at most once
    /// per --maintain-interval.
    #[arg(long)]
    pub maintain: bool,
    /// How often --maintain runs.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub maintain_interval: Duration,
    /// A directory is polled this often when it holds no file.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub poll_interval: Duration,
    /// A directory: stop once it holds no file (instead of waiting for more).
    #[arg(long)]
    pub once: bool,
    /// Add records' new columns to the table (optional columns) in the same commit.
    #[arg(long)]
    pub evolve_schema: bool,
    /// One JSON document per commit on standard output.
    #[arg(long)]
    pub json: bool,
}

/// The running sink: its writer, its counters and where it reports.
struct Sink<'a> {
    a: &'a SinkArgs,
    cat: floe::Catalog,
    table: Table,
    writer: KeyedWriter,
    committed: Option<i64>,
    commits: u64,
    records: u64,
    skipped: u64,
    dead: u64,
    started: Instant,
    last_maintain: Instant,
    /// A maintenance pass ran since the last commit.
    maintained: bool,
}

/// `floe sink`.
pub async fn sink(cli: &Cli, a: &SinkArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = on_signals(stop.clone())?;
    let (cat, table) = catalog_and_table(cli, &a.name).await?;
    floe::spec::keyed::KeyedSpec::of(table.metadata(), &table.name())
        .map_err(|e| e.with_hint("floe sink writes keyed tables: create one with --primary-key"))?;
    floe::spec::keyed::check_sink_id(&a.sink_id)?;
    if a.max_batch_rows == 0 {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "--max-batch-rows must be at least 1",
        ));
    }
    let writer = KeyedWriter::new(&cat, table.ident().clone())
        .with_sink_id(a.sink_id.clone())
        .with_evolve_schema(a.evolve_schema);
    let committed = writer.committed_checkpoint().await?;
    let mut s = Sink {
        a,
        cat,
        table,
        writer,
        committed,
        commits: 0,
        records: 0,
        skipped: 0,
        dead: 0,
        started: Instant::now(),
        last_maintain: Instant::now(),
        maintained: false,
    };
    eprintln!(
        "sink {} → {}: reading {}; committed checkpoint {}",
        a.sink_id,
        a.name,
        if a.from == "-" {
            "standard input"
        } else {
            &a.from
        },
        committed
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into())
    );
    let r = if a.from == "-" {
        s.read_stdin(&stop, stopped).await
    } else {
        s.read_dir_files(Path::new(&a.from), &stop, stopped).await
    };
    eprintln!(
        "sink {} stopped: {} commits, {} records, {} replayed records skipped, {} dead letters; \
         checkpoint {}",
        a.sink_id,
        s.commits,
        s.records,
        s.skipped,
        s.dead,
        s.committed
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into())
    );
    r
}

/// One record line read from standard input.
enum Msg {
    Line(String),
    Failed(String),
    End,
}

/// A record's source position: Debezium's `source.lsn`, or a JSON line's `field`.
fn position(line: &str, format: ChangeFormat, field: Option<&str>) -> Option<i64> {
    let v: Value = serde_json::from_str(line).ok()?;
    let n = match (format, field) {
        (_, Some(f)) => v.get(f)?.clone(),
        (ChangeFormat::DebeziumJson, None) => {
            let payload = match v.get("payload") {
                Some(p) if p.is_object() => p,
                _ => &v,
            };
            payload.get("source")?.get("lsn")?.clone()
        }
        _ => return None,
    };
    n.as_i64()
}

impl Sink<'_> {
    fn stream_format(&self) -> Result<ChangeFormat> {
        match self.a.format.unwrap_or(ChangeFormat::DebeziumJson) {
            f @ (ChangeFormat::DebeziumJson | ChangeFormat::Jsonl) => Ok(f),
            f => Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "standard input takes one record per line (--format debezium-json or \
                     jsonl), not {f:?}; put such files in a directory and use --from DIR"
                ),
            )),
        }
    }

    async fn read_stdin(
        &mut self,
        stop: &AtomicBool,
        mut stopped: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        let format = self.stream_format()?;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Msg>(16_384);
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let m = match line {
                    Ok(l) => Msg::Line(l),
                    Err(e) => Msg::Failed(e.to_string()),
                };
                let last = matches!(m, Msg::Failed(_));
                if tx.blocking_send(m).is_err() || last {
                    return;
                }
            }
            let _ = tx.blocking_send(Msg::End);
        });
        let field = self.a.position_field.clone();
        let mut batch: Vec<(u64, String)> = Vec::new();
        let mut top: Option<i64> = None;
        let mut first_at = Instant::now();
        let mut line_no = 0u64;
        let mut warned = false;
        loop {
            let deadline = tokio::time::Instant::from_std(first_at + self.a.commit_interval);
            let msg = tokio::select! {
                m = rx.recv() => m.unwrap_or(Msg::End),
                _ = tokio::time::sleep_until(deadline), if !batch.is_empty() => {
                    self.flush_lines(format, &mut batch, &mut top, first_at).await?;
                    continue;
                }
                _ = stopped.changed() => Msg::End,
            };
            match msg {
                Msg::Line(l) => {
                    line_no += 1;
                    if l.trim().is_empty() {
                        continue;
                    }
                    match position(&l, format, field.as_deref()) {
                        Some(p) if self.committed.is_some_and(|c| p <= c) => {
                            self.skipped += 1;
                            continue;
                        }
                        Some(p) => top = top.max(Some(p)),
                        None if !warned => {
                            warned = true;
                            eprintln!(
                                "warning: line {line_no} carries no source position ({}): \
                                 records without one are applied again if a restarted sink is \
                                 sent them again",
                                match &field {
                                    Some(f) => format!("no numeric field '{f}'"),
                                    None if format == ChangeFormat::Jsonl => {
                                        "name one with --position-field".to_string()
                                    }
                                    None => "no source.lsn".to_string(),
                                }
                            );
                        }
                        None => {}
                    }
                    if batch.is_empty() {
                        first_at = Instant::now();
                    }
                    batch.push((line_no, l));
                    if batch.len() >= self.a.max_batch_rows {
                        self.flush_lines(format, &mut batch, &mut top, first_at)
                            .await?;
                    }
                }
                Msg::Failed(e) => {
                    self.flush_lines(format, &mut batch, &mut top, first_at)
                        .await?;
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!("reading standard input after line {line_no}: {e}"),
                    ));
                }
                Msg::End => {
                    self.flush_lines(format, &mut batch, &mut top, first_at)
                        .await?;
                    if stop.load(Ordering::Relaxed) {
                        eprintln!("interrupted: every batch read so far is committed");
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Decodes record lines into rows of the table.
    fn decode(&self, format: ChangeFormat, lines: &[&str], what: &str) -> Result<RecordBatch> {
        let text = lines.join("\n");
        match format {
            ChangeFormat::DebeziumJson => floe::keyed::debezium::decode(&text, what, &self.table),
            _ => {
                let schema = with_function_inputs(&self.table)?;
                let batches: Vec<RecordBatch> = super::json_lines::jsonl_reader(
                    std::io::Cursor::new(text.into_bytes()),
                    &schema,
                    what.to_string(),
                )?
                .collect::<Result<_>>()?;
                Ok(arrow::compute::concat_batches(&schema, &batches)?)
            }
        }
    }

    async fn flush_lines(
        &mut self,
        format: ChangeFormat,
        batch: &mut Vec<(u64, String)>,
        top: &mut Option<i64>,
        first_at: Instant,
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let lines: Vec<&str> = batch.iter().map(|(_, l)| l.as_str()).collect();
        let (from, to) = (batch[0].0, batch[batch.len() - 1].0);
        let rows = match self.decode(format, &lines, &format!("standard input lines {from}–{to}"))
        {
            Ok(rows) => rows,
            Err(_) => {
                // Find the records that fail, one by one.
                let mut good = Vec::new();
                for (n, l) in batch.iter() {
                    let one = match format {
                        ChangeFormat::DebeziumJson => floe::keyed::debezium::decode_lines(
                            l,
                            "standard input",
                            *n,
                            &self.table,
                        ),
                        _ => self.decode(format, &[l], &format!("standard input line {n}")),
                    };
                    match one {
                        Ok(_) => good.push(l.as_str()),
                        Err(e) => match &self.a.dead_letter {
                            Some(dl) => {
                                self.dead_letter_line(dl, *n, l, &e)?;
                            }
                            None => {
                                return Err(e.context(format!(
                                    "sink {}: nothing of the batch of lines {from}–{to} was \
                                     committed (checkpoint {}); fix the record, or pass \
                                     --dead-letter FILE to set such records aside",
                                    self.a.sink_id,
                                    self.committed
                                        .map(|c| c.to_string())
                                        .unwrap_or_else(|| "none".into())
                                )))
                            }
                        },
                    }
                }
                self.decode(format, &good, &format!("standard input lines {from}–{to}"))?
            }
        };
        let n = batch.len() as u64;
        let checkpoint = *top;
        self.commit(vec![rows], checkpoint, first_at, None).await?;
        self.records += n;
        batch.clear();
        *top = None;
        Ok(())
    }

    fn dead_letter_line(&mut self, path: &str, line: u64, record: &str, e: &Error) -> Result<()> {
        let doc = serde_json::json!({
            "line": line,
            "error": e.to_string(),
            "record": record,
        });
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|err| {
                Error::new(ErrorKind::Io, format!("dead-letter file '{path}': {err}"))
            })?;
        writeln!(f, "{doc}")
            .and_then(|_| f.sync_data())
            .map_err(|err| {
                Error::new(ErrorKind::Io, format!("dead-letter file '{path}': {err}"))
            })?;
        self.dead += 1;
        eprintln!("dead letter: line {line} → {path}: {e}");
        Ok(())
    }

    /// Commits `rows` with `checkpoint`, reports it, and maintains the table when due.
    async fn commit(
        &mut self,
        rows: Vec<RecordBatch>,
        checkpoint: Option<i64>,
        first_at: Instant,
        files: Option<&[String]>,
    ) -> Result<UpsertResult> {
        let started = Instant::now();
        let after_maintain = std::mem::take(&mut self.maintained);
        let r = self.writer.apply(rows, checkpoint).await.map_err(|e| {
            e.context(format!(
                "sink {}: the batch was not committed (checkpoint {} stays)",
                self.a.sink_id,
                self.committed
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "none".into())
            ))
        })?;
        self.commits += u64::from(r.snapshot_id.is_some());
        if r.committed_checkpoint.is_some() {
            self.committed = r.committed_checkpoint;
        }
        self.table = r.table.clone();
        let lag_ms = first_at.elapsed().as_millis() as u64;
        if self.a.json {
            let mut v = super::report::upsert(
                &self.a.name,
                &Some(self.a.sink_id.clone()),
                checkpoint,
                &r,
                started,
            );
            if let Some(o) = v.as_object_mut() {
                o.insert("lag_ms".into(), lag_ms.into());
                if after_maintain {
                    o.insert("after_maintain".into(), true.into());
                }
                if let Some(f) = files {
                    o.insert("files".into(), f.into());
                }
            }
            outln!("{v}");
        } else {
            let total = self.started.elapsed().as_secs_f64().max(1e-3);
            eprintln!(
                "checkpoint {}: {} records ({} inserted, {} updated, {} deleted, {} stale) in \
                 {} ms, lag {:.1} s; {:.0} records/s since start",
                checkpoint
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
                r.input_rows,
                r.inserted,
                r.updated,
                r.deleted + r.deleted_absent,
                r.ignored,
                started.elapsed().as_millis(),
                lag_ms as f64 / 1000.0,
                (self.records + r.input_rows) as f64 / total
            );
        }
        if self.a.maintain && self.last_maintain.elapsed() >= self.a.maintain_interval {
            self.last_maintain = Instant::now();
            self.maintained = true;
            let t = self.cat.load_table(self.table.ident()).await?;
            match floe::maintenance::maintain(&self.cat, &t, &Default::default()).await {
                Ok(m) => {
                    // The pass moved rows: the key index follows them now, between
                    // commits, rather than in the next batch's commit.
                    let at = Instant::now();
                    let index = match self.writer.refresh().await {
                        Ok(r) => r.as_str().to_string(),
                        Err(e) => format!("dropped ({e})"),
                    };
                    eprintln!(
                        "maintain: {} commits ({}), {} failed steps; key index {index} in {} ms",
                        m.commits,
                        m.steps
                            .iter()
                            .filter(|s| s.action == "done")
                            .map(|s| s.step)
                            .collect::<Vec<_>>()
                            .join(", "),
                        m.failed_steps,
                        at.elapsed().as_millis()
                    )
                }
                Err(e) => eprintln!("maintain skipped: {e}"),
            }
        }
        Ok(r)
    }

    async fn read_dir_files(
        &mut self,
        dir: &Path,
        stop: &AtomicBool,
        mut stopped: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        let io = |what: &str, p: &Path, e: std::io::Error| {
            Error::new(ErrorKind::Io, format!("{what} '{}': {e}", p.display()))
        };
        if !dir.is_dir() {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "--from '{}' is not a directory (use - for standard input)",
                    dir.display()
                ),
            ));
        }
        let state = dir.join(format!(".floe-sink-{}", self.a.sink_id));
        let done = state.join("done");
        std::fs::create_dir_all(&done).map_err(|e| io("creating", &done, e))?;
        self.recover(&state, &done)?;
        let schema = with_function_inputs(&self.table)?;
        while !stop.load(Ordering::Relaxed) {
            let files = ready_files(dir)?;
            if files.is_empty() {
                if self.a.once {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(self.a.poll_interval) => {}
                    _ = stopped.changed() => {}
                }
                continue;
            }
            let first_at = Instant::now();
            let (mut taken, mut rows, mut n) = (Vec::new(), Vec::new(), 0usize);
            for f in files {
                let p = f.to_string_lossy().into_owned();
                match read_changes(
                    &p,
                    self.a.format,
                    &self.table,
                    &schema,
                    &super::input::CsvArgs::default(),
                ) {
                    Ok(b) => {
                        n += b.iter().map(|b| b.num_rows()).sum::<usize>();
                        rows.extend(b);
                        taken.push(f);
                    }
                    Err(e) => match &self.a.dead_letter {
                        Some(dl) => self.dead_letter_file(Path::new(dl), &f, &e)?,
                        None => {
                            return Err(e.context(format!(
                                "sink {}: file '{p}' cannot be read; nothing of it was \
                                 committed; fix or remove it, or pass --dead-letter DIR",
                                self.a.sink_id
                            )))
                        }
                    },
                }
                if n >= self.a.max_batch_rows {
                    break;
                }
            }
            if taken.is_empty() {
                continue;
            }
            let k = self.committed.unwrap_or(0) + 1;
            let names: Vec<String> = taken
                .iter()
                .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            let pending = state.join(format!("pending-{k}.json"));
            let tmp = state.join(format!(".pending-{k}.json.tmp"));
            std::fs::write(&tmp, serde_json::to_vec(&names).unwrap_or_default())
                .and_then(|_| std::fs::rename(&tmp, &pending))
                .map_err(|e| io("writing", &pending, e))?;
            match self.commit(rows, Some(k), first_at, Some(&names)).await {
                Ok(_) => {}
                Err(e) => {
                    if e.kind() != ErrorKind::CommitStateUnknown {
                        let _ = std::fs::remove_file(&pending);
                    }
                    return Err(e);
                }
            }
            self.records += n as u64;
            finish(dir, &done, &names)?;
            std::fs::remove_file(&pending).map_err(|e| io("removing", &pending, e))?;
        }
        if stop.load(Ordering::Relaxed) {
            eprintln!("interrupted: every file taken so far is committed");
        }
        Ok(())
    }

    /// A restart: batches whose checkpoint the table holds are finished (their files moved
    /// to `done/`); the others are dropped, their files read again.
    fn recover(&self, state: &Path, done: &Path) -> Result<()> {
        let entries = std::fs::read_dir(state)
            .map_err(|e| Error::new(ErrorKind::Io, format!("'{}': {e}", state.display())))?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(k) = name
                .strip_prefix("pending-")
                .and_then(|r| r.strip_suffix(".json"))
                .and_then(|k| k.parse::<i64>().ok())
            else {
                continue;
            };
            let committed = self.committed.is_some_and(|c| k <= c);
            if committed {
                let names: Vec<String> = std::fs::read(e.path())
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::Corrupt,
                            format!(
                                "'{}' is not a list of file names; the table holds its batch \
                             (checkpoint {k}): move those files out of the directory by hand",
                                e.path().display()
                            ),
                        )
                    })?;
                let dir = state.parent().unwrap_or(state);
                finish(dir, done, &names)?;
                eprintln!("recovered: batch {k} ({} files) was committed", names.len());
            } else {
                eprintln!("recovered: batch {k} was not committed; its files are read again");
            }
            std::fs::remove_file(e.path()).map_err(|err| {
                Error::new(ErrorKind::Io, format!("'{}': {err}", e.path().display()))
            })?;
        }
        Ok(())
    }

    fn dead_letter_file(&mut self, dl: &Path, f: &Path, e: &Error) -> Result<()> {
        let io = |err: std::io::Error| {
            Error::new(
                ErrorKind::Io,
                format!("dead-letter directory '{}': {err}", dl.display()),
            )
        };
        std::fs::create_dir_all(dl).map_err(io)?;
        let name = f.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        let to = dl.join(&name);
        std::fs::rename(f, &to).map_err(io)?;
        let mut why = to.clone().into_os_string();
        why.push(".error.txt");
        std::fs::write(PathBuf::from(why), format!("{e}\n")).map_err(io)?;
        self.dead += 1;
        eprintln!("dead letter: '{}' → '{}': {e}", f.display(), to.display());
        Ok(())
    }
}

/// The files of `dir` ready to take, in name order.
fn ready_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::new(ErrorKind::Io, format!("listing '{}': {e}", dir.display())))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let partial = name.starts_with('.')
            || name.ends_with(".tmp")
            || name.ends_with(".part")
            || name.ends_with(".crdownload");
        if !partial && e.file_type().is_ok_and(|t| t.is_file()) {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Moves a committed batch's files into `done/`.
fn finish(dir: &Path, done: &Path, names: &[String]) -> Result<()> {
    for n in names {
        let from = dir.join(n);
        if from.exists() {
            std::fs::rename(&from, done.join(n)).map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "moving committed '{}' to '{}': {e}",
                        from.display(),
                        done.display()
                    ),
                )
            })?;
        }
    }
    Ok(())
}
