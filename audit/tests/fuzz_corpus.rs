//! Replays the seed corpus of the `audit_verify` fuzz target (`fuzz/corpus/audit_verify`)
//! through the same function the target calls, so a crash the fuzzer once found stays fixed
//! without nightly. `write_seed_corpus` (ignored) regenerates the seeds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::PathBuf;

use garuda_audit::checkpoint::{origin, Checkpoint};
use garuda_audit::merkle::{leaf_hash, Tree};
use garuda_audit::{fuzz_secret, fuzz_seed, verify_session_bytes, Code, Severity, FUZZ_SESSION};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/audit_verify")
}

#[test]
fn audit_verify_corpus() {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "{}: expected a seed corpus, found {} files",
        dir.display(),
        files.len()
    );
    for path in files {
        eprintln!("{}", path.display());
        garuda_audit::exercise(&fs::read(&path).unwrap());
    }
}

#[test]
fn generated_sessions_verify_and_mutations_do_not() {
    let keys = [fuzz_secret()];
    for (events, per_epoch, close) in [(0, 4, true), (3, 4, true), (12, 3, true), (5, 4, false)] {
        let data = fuzz_seed(events, per_epoch, close);
        let findings = verify_session_bytes(FUZZ_SESSION, &data, &keys);
        assert!(
            findings.is_empty(),
            "{events}/{per_epoch}/{close}: {findings:?}"
        );
        // Every single-byte flip inside a line is caught: an error, or KEY_UNKNOWN when the
        // flip hits the first line's key id (then only the index can name the real key).
        for i in (0..data.len()).step_by(7) {
            if data[i] == b'\n' {
                continue;
            }
            let mut m = data.clone();
            m[i] ^= 0x01;
            let f = verify_session_bytes(FUZZ_SESSION, &m, &keys);
            assert!(
                f.iter().any(|f| f.severity == Severity::Error
                    || (f.code == Code::KeyUnknown && f.severity == Severity::Undecidable)),
                "flip at {i} undetected"
            );
        }
    }
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let closed = fuzz_seed(3, 4, true);
    let mut torn = closed.clone();
    torn.extend_from_slice(&closed[..60]);
    let mut flipped = closed.clone();
    flipped[150] ^= 0x20;
    let text = String::from_utf8(closed.clone()).unwrap();
    let dup = text
        .replacen("{\"cmd\":", "{\"cmd\":1,\"cmd\":", 1)
        .into_bytes();
    let first_line = text.lines().nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(first_line).unwrap();
    let reser = text
        .replacen(first_line, &serde_json::to_string(&v).unwrap(), 1)
        .into_bytes();
    let deep = format!(
        "{}{}{}\n",
        &first_line[..first_line.find("\"event\":").unwrap() + 8],
        "[".repeat(200),
        "]".repeat(200)
    )
    .into_bytes();
    let mut tree = Tree::new();
    for l in closed.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
        tree.push(leaf_hash(l));
    }
    let key = fuzz_secret()
        .session_key("fuzz-0000000000000000", FUZZ_SESSION)
        .checkpoint_key();
    let note = Checkpoint {
        origin: origin("fuzz-0000000000000000", FUZZ_SESSION),
        size: 5,
        root: tree.root_at(5),
        epoch: 0,
    }
    .sign(&key);
    let request = garuda_audit::witness::add_request(3, &tree.consistency_proof(3, 5), &note);
    vec![
        ("seed-closed-small", closed),
        ("seed-closed-epochs", fuzz_seed(12, 3, true)),
        ("seed-open", fuzz_seed(5, 4, false)),
        ("seed-empty", Vec::new()),
        ("seed-torn-tail", torn),
        ("seed-flipped-byte", flipped),
        ("seed-duplicate-key", dup),
        ("seed-reserialised", reser),
        ("seed-deep-json", deep),
        (
            "seed-archive",
            garuda_audit::archive_encode(&fuzz_seed(6, 3, true)),
        ),
        ("seed-checkpoint-note", note.into_bytes()),
        ("seed-witness-add", request),
        (
            "seed-witness-latest",
            format!("latest {}\n", origin("fuzz-0000000000000000", FUZZ_SESSION)).into_bytes(),
        ),
    ]
}

#[test]
#[ignore = "regenerates fuzz/corpus/audit_verify; run by hand after a format change"]
fn write_seed_corpus() {
    let dir = corpus_dir();
    fs::create_dir_all(&dir).unwrap();
    for (name, data) in seeds() {
        fs::write(dir.join(name), data).unwrap();
    }
}
