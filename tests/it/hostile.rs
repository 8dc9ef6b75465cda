//! Archives built to take memoryd's memory (SPEC §2.7), imported into the
//! real binary: each is refused, or taken, while the process's peak resident
//! memory grows by less than 128 MiB over what it held before the upload;
//! and an export of a large conversation, streamed rather than held.

use crate::harness::Backend;
use crate::process::{Memoryd, database_env, new_tenant};
use serde_json::Value;
use std::io::Write;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// The process's memory may grow by less than this for any one archive.
const BOUND: u64 = 128 * MIB;

crate::every_backend!(
    archives_built_to_exhaust_memory_take_a_bounded_buffer,
    an_export_holds_no_conversation_in_memory_whole,
);

/// A field of `/proc/<pid>/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}"));
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Resets the process's peak resident memory to what it holds now (as root,
/// through `clear_refs`), so the next peak is that of the next archive.
fn reset_peak(pid: u32) -> u64 {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("clear_refs needs root");
    status_bytes(pid, "VmRSS:")
}

/// A gzip of the bytes `write` gives, compressed as they come.
fn gzip(write: impl FnOnce(&mut dyn Write)) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    write(&mut encoder);
    encoder.write_all(&[0u8; 1024]).unwrap();
    encoder.finish().unwrap()
}

/// A ustar header of `kind` for `size` bytes.
fn header(name: &str, kind: tar::EntryType, size: u64) -> [u8; 512] {
    let mut header = tar::Header::new_ustar();
    header.set_path(name).unwrap();
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    *header.as_bytes()
}

/// One entry of `size` bytes whose content `fill` writes, padded to a block.
fn entry(out: &mut dyn Write, name: &str, kind: tar::EntryType, size: u64, fill: impl FnOnce(&mut dyn Write)) {
    out.write_all(&header(name, kind, size)).unwrap();
    fill(out);
    out.write_all(&vec![0u8; (size.div_ceil(512) * 512 - size) as usize]).unwrap();
}

fn repeat(out: &mut dyn Write, byte: u8, count: u64) {
    let chunk = vec![byte; MIB as usize];
    let mut left = count;
    while left > 0 {
        let n = left.min(MIB);
        out.write_all(&chunk[..n as usize]).unwrap();
        left -= n;
    }
}

fn small_rollout(out: &mut dyn Write) {
    entry(out, "sessions/ok.jsonl", tar::EntryType::Regular, 3, |o| o.write_all(b"{}\n").unwrap());
}

/// A 300 MiB PAX record naming the next entry, as the archive's first entry.
fn pax_archive() -> &'static [u8] {
    static ARCHIVE: OnceLock<Vec<u8>> = OnceLock::new();
    ARCHIVE.get_or_init(|| {
        let value = 300 * MIB;
        // A PAX record is "<its length> path=<value>\n", the length counting its own digits.
        let body = " path=\n".len() as u64 + value;
        let record = body + (body + 10).to_string().len() as u64;
        let length = record.to_string();
        gzip(|out| {
            entry(out, "PaxHeaders/x", tar::EntryType::XHeader, record, |o| {
                write!(o, "{length} path=").unwrap();
                repeat(o, b'a', value);
                o.write_all(b"\n").unwrap();
            });
            small_rollout(out);
        })
    })
}

/// A 300 MiB GNU long name, after an ordinary entry.
fn long_name_archive() -> &'static [u8] {
    static ARCHIVE: OnceLock<Vec<u8>> = OnceLock::new();
    ARCHIVE.get_or_init(|| {
        gzip(|out| {
            small_rollout(out);
            entry(out, "././@LongLink", tar::EntryType::GNULongName, 300 * MIB + 1, |o| {
                repeat(o, b'b', 300 * MIB);
                o.write_all(b"\0").unwrap();
            });
            entry(out, "memories/x.md", tar::EntryType::Regular, 1, |o| o.write_all(b"x").unwrap());
        })
    })
}

/// A manifest of `size` bytes, nearly all of it a list of zeros.
fn padded_manifest(size: u64) -> Vec<u8> {
    let head = br#"{"format": "memoryd-export", "version": 1, "layouts": [], "pad": [0"#;
    let pairs = (size - head.len() as u64 - 2) / 2;
    gzip(|out| {
        entry(out, "memoryd-export.json", tar::EntryType::Regular, head.len() as u64 + pairs * 2 + 2, |o| {
            o.write_all(head).unwrap();
            let chunk = b",0".repeat(MIB as usize / 2);
            let mut left = pairs;
            while left > 0 {
                let n = left.min(MIB / 2);
                o.write_all(&chunk[..n as usize * 2]).unwrap();
                left -= n;
            }
            o.write_all(b"]}").unwrap();
        });
    })
}

/// A rollout of one line of `digits` pseudo-random digits in a JSON list:
/// a tree of millions of numbers, if a reader built one.
fn number_line_archive(name: &str, digits: u64) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut line = Vec::with_capacity(digits as usize * 2 + 8);
    line.extend_from_slice(b"{\"n\":[0");
    for _ in 1..digits {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        line.extend_from_slice(&[b',', b'0' + (state % 10) as u8]);
    }
    line.extend_from_slice(b"]}\n");
    let archive =
        gzip(|out| entry(out, name, tar::EntryType::Regular, line.len() as u64, |o| o.write_all(&line).unwrap()));
    assert!(archive.len() as u64 * 10 > line.len() as u64, "the archive must pass the expansion check");
    archive
}

/// Uploads an archive and follows its job: `Ok(())` if it was imported,
/// `Err(error)` if it was refused (at the upload or by its job).
async fn import(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    workspace: &str,
    archive: Vec<u8>,
) -> Result<(), String> {
    let res = http
        .post(format!("{base}/v1/workspaces/{workspace}/import"))
        .bearer_auth(key)
        .header("content-type", "application/gzip")
        .body(archive)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap();
    if status == 422 {
        assert_eq!(body["code"], "invalid_archive", "{body}");
        return Err(body["detail"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(status, 202, "{body}");
    let started = Instant::now();
    loop {
        let job: Value = http
            .get(format!("{base}/v1/jobs/{}", body["job_id"].as_str().unwrap()))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        match job["state"].as_str() {
            Some("succeeded") => return Ok(()),
            Some("queued" | "running") => {}
            _ => return Err(job["last_error"].as_str().unwrap_or_default().to_owned()),
        }
        assert!(started.elapsed() < Duration::from_secs(120), "the import did not finish: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn archives_built_to_exhaust_memory_take_a_bounded_buffer(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut env = database_env(backend).await;
    env.push(("MEMORYD_MAX_SEGMENT_BYTES", (8 * MIB).to_string()));
    let memoryd = Memoryd::spawn(dir.path(), "memoryd", &["serve"], &env);
    let http = reqwest::Client::new();
    memoryd.ready(&http).await;
    let (_, key) = new_tenant(&http, &memoryd.base).await;
    let pid = memoryd.child.id();
    type Expected = Result<(), &'static str>;
    let cases: Vec<(&str, Vec<u8>, Expected)> = vec![
        ("pax", pax_archive().to_vec(), Err("extension header")),
        ("long-name", long_name_archive().to_vec(), Err("extension header")),
        ("manifest-64m", padded_manifest(64 * MIB), Err("memoryd-export.json is larger than")),
        ("manifest-15m", padded_manifest(15 * MIB), Err("expands past 10 times")),
        ("numbers", number_line_archive("sessions/numbers.jsonl", 3 * MIB), Ok(())),
        (
            "long-line",
            number_line_archive("sessions/long.jsonl", 5 * MIB),
            Err("sessions/long.jsonl line 1: longer than"),
        ),
    ];
    for (workspace, archive, expected) in cases {
        let compressed = archive.len();
        let before = reset_peak(pid);
        let outcome = import(&http, &memoryd.base, &key, workspace, archive).await;
        let grown = status_bytes(pid, "VmHWM:").saturating_sub(before);
        match (&outcome, expected) {
            (Ok(()), Ok(())) => {}
            (Err(error), Err(part)) => assert!(error.contains(part), "{workspace}: {error}"),
            _ => panic!("{workspace}: {outcome:?}, expected {expected:?}"),
        }
        assert!(grown < BOUND, "{workspace} ({compressed} bytes) grew memoryd by {} MiB", grown / MIB);
    }
    let log = memoryd.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// A conversation of 42 MiB (fourteen segments of 3 MiB), consolidated, then
/// exported: the export streams it (from its file, or its object in a
/// bucket), and memoryd's peak memory grows by less than half of it.
async fn an_export_holds_no_conversation_in_memory_whole(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let env = database_env(backend).await;
    let memoryd = Memoryd::spawn(dir.path(), "memoryd", &["serve"], &env);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    memoryd.ready(&http).await;
    let (_, key) = new_tenant(&http, &memoryd.base).await;
    for turn in 0..14 {
        let said = format!("turn {turn}: {}", "w".repeat(3 * MIB as usize));
        let body = serde_json::json!({"rollout_id": "long", "input": said, "final_output": "ok"});
        crate::process::post_segment(&http, &memoryd.base, &key, "s", body).await;
    }
    let res = http.post(format!("{}/v1/sessions/s/close?wait=120", memoryd.base)).bearer_auth(&key).send().await;
    assert_eq!(res.unwrap().status(), 200);

    let pid = memoryd.child.id();
    let before = reset_peak(pid);
    let mut res =
        http.get(format!("{}/v1/workspaces/default/export", memoryd.base)).bearer_auth(&key).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let mut exported = 0;
    while let Some(chunk) = res.chunk().await.unwrap() {
        exported += chunk.len() as u64;
    }
    let grown = status_bytes(pid, "VmHWM:").saturating_sub(before);
    assert!(exported > 0, "the archive arrived");
    assert!(grown < 21 * MIB, "an export of a 42 MiB conversation grew memoryd by {} MiB", grown / MIB);
}
