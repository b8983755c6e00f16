//! The executor probe cache (`$GARUDA_HOME/cache/executors.json`): a run writes the probe's
//! positive answers, the next run uses them instead of probing; the file is hostile input that
//! can only ever claim an executor is available, and a false claim fails closed (exit 125).
//!
//! Every test covers `landlock` and `bubblewrap`, and passes as root and as an unprivileged
//! user. The fail-closed test needs `unshare` (util-linux) to make a user namespace where no
//! further namespace can be created (`user.max_user_namespaces=0` inside it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{base_dir, garuda, text};

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const EXECUTORS: [&str; 2] = ["landlock", "bubblewrap"];

struct World {
    base: tempfile::TempDir,
    home: PathBuf,
    garuda_home: PathBuf,
    project: PathBuf,
}

fn world() -> World {
    let base = base_dir("garuda-probe-cache-tests");
    let home = base.path().join("home");
    let project = base.path().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(project.join(".git")).unwrap();
    World {
        garuda_home: base.path().join("garuda-home"),
        home,
        project,
        base,
    }
}

impl World {
    fn cache(&self) -> PathBuf {
        self.garuda_home.join("cache/executors.json")
    }

    fn garuda(&self, args: &[&str]) -> Output {
        Command::new(garuda())
            .args(args)
            .current_dir(&self.project)
            .env("HOME", &self.home)
            .env("GARUDA_HOME", &self.garuda_home)
            .output()
            .unwrap()
    }

    /// `garuda sandbox --verbose [--executor X] -- true`.
    fn run(&self, executor: Option<&str>) -> Output {
        let mut args = vec!["sandbox", "--verbose"];
        if let Some(x) = executor {
            args.extend(["--executor", x]);
        }
        args.extend(["--project", self.project.to_str().unwrap(), "--", "true"]);
        self.garuda(&args)
    }

    fn read_cache(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.cache()).unwrap()).unwrap()
    }

    fn write_cache(&self, v: &Value) {
        std::fs::write(self.cache(), serde_json::to_vec(v).unwrap()).unwrap();
    }
}

/// The `garuda: executor …` line of a verbose run.
fn executor_line(out: &Output) -> String {
    text(&out.stderr)
        .lines()
        .find(|l| l.starts_with("garuda: executor "))
        .unwrap_or_else(|| panic!("no executor line: {}", text(&out.stderr)))
        .to_string()
}

fn ok(out: &Output, what: &str) {
    assert_eq!(out.status.code(), Some(0), "{what}: {}", text(&out.stderr));
}

fn entry<'a>(cache: &'a Value, kind: &str) -> Option<&'a Value> {
    cache["executors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == kind)
}

fn uid() -> u32 {
    std::fs::metadata("/proc/self").unwrap().uid()
}

/// A run writes the cache (mode 0600, keyed by this machine) and the next run uses it: its
/// reason names the cache and shows the cached detail (a marker no probe prints), and the file
/// is not rewritten. Control: the first run, with no cache, probed (no cache in its reason).
#[test]
fn a_run_writes_the_cache_and_the_next_run_uses_it_instead_of_probing() {
    for x in EXECUTORS {
        let w = world();
        let first = w.run(Some(x));
        ok(&first, x);
        let line = executor_line(&first);
        assert!(
            line.starts_with(&format!(
                "garuda: executor {x} (selected by the executor setting): "
            )) && !line.contains("cached probe"),
            "{line}"
        );
        let meta = std::fs::symlink_metadata(w.cache()).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let cache = w.read_cache();
        let key = &cache["key"];
        assert_eq!(key["uid"], uid());
        assert_eq!(
            key["kernel_release"],
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap()
                .trim()
        );
        assert_eq!(
            key["boot_id"],
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .unwrap()
                .trim()
        );
        assert_eq!(
            key["bwrap"]["ino"],
            std::fs::metadata("/usr/bin/bwrap").unwrap().ino()
        );
        let e = entry(&cache, x).unwrap_or_else(|| panic!("{x} not cached: {cache}"));
        assert_eq!(e["available"], true);

        // The next run takes the cache's word: no rewrite, the cached detail.
        let ino = std::fs::metadata(w.cache()).unwrap().ino();
        let second = w.run(Some(x));
        ok(&second, x);
        assert!(
            executor_line(&second).ends_with(&format!(" (cached probe: {})", w.cache().display())),
            "{}",
            executor_line(&second)
        );
        assert_eq!(std::fs::metadata(w.cache()).unwrap().ino(), ino, "{x}");
        let mut marked = w.read_cache();
        for e in marked["executors"].as_array_mut().unwrap() {
            e["detail"] = "MARKER from the cache".into();
        }
        w.write_cache(&marked);
        let third = w.run(Some(x));
        ok(&third, x);
        assert!(
            executor_line(&third).contains(": MARKER from the cache (cached probe: "),
            "{}",
            executor_line(&third)
        );
    }
    // auto uses it too.
    let w = world();
    ok(&w.run(None), "auto");
    let again = w.run(None);
    ok(&again, "auto");
    assert!(
        executor_line(&again)
            .starts_with("garuda: executor landlock (auto: the strongest available): ")
            && executor_line(&again).contains("(cached probe: "),
        "{}",
        executor_line(&again)
    );
}

/// A change to a cache's key.
type KeyChange = fn(&mut Value);

/// A cache written under another key (the bwrap binary replaced, a kernel upgrade, another
/// machine's boot, another user, another Landlock ABI, a sysctl) is not used: the run probes
/// (the marker detail is not shown) and rewrites it with this machine's key. Control: the same
/// file with the key untouched is used (previous test, and the last step here).
#[test]
fn a_cache_for_another_key_is_probed_again_and_rewritten() {
    let changes: [(&str, KeyChange); 6] = [
        ("bwrap", |k| {
            k["bwrap"]["ino"] = (k["bwrap"]["ino"].as_u64().unwrap() + 1).into()
        }),
        ("kernel", |k| k["kernel_release"] = "5.4.0-older".into()),
        ("boot_id", |k| {
            k["boot_id"] = "00000000-0000-0000-0000-000000000000".into()
        }),
        ("uid", |k| {
            k["uid"] = (k["uid"].as_u64().unwrap() + 1).into()
        }),
        ("landlock_abi", |k| k["landlock_abi"] = 99.into()),
        ("sysctl", |k| {
            k["sysctls"]["user/max_user_namespaces"] = "1".into()
        }),
    ];
    for x in EXECUTORS {
        let w = world();
        ok(&w.run(Some(x)), x);
        let good = w.read_cache();
        for (what, change) in &changes {
            let mut stale = good.clone();
            change(&mut stale["key"]);
            stale["executors"][0]["detail"] = "MARKER stale".into();
            w.write_cache(&stale);
            let out = w.run(Some(x));
            ok(&out, what);
            let line = executor_line(&out);
            assert!(
                !line.contains("MARKER") && !line.contains("cached probe"),
                "{x}, {what}: {line}"
            );
            assert_eq!(w.read_cache()["key"], good["key"], "{x}, {what}: rewritten");
        }
        // Control: the marker under the right key is believed.
        let mut current = w.read_cache();
        current["executors"][0]["detail"] = "MARKER current".into();
        w.write_cache(&current);
        assert!(executor_line(&w.run(Some(x))).contains("MARKER current"));
    }
}

/// A cache that says an executor is *unavailable* is not believed: that executor is probed
/// live and runs. (Believing it would let a planted file send `auto` to a weaker executor or
/// the host: the unit test `select::tests::believing_the_cache_s_negatives_would_pick_the_host`
/// shows the same rule without this check choosing the host.)
#[test]
fn a_cache_claiming_executors_unavailable_is_ignored() {
    let w = world();
    ok(&w.run(Some("landlock")), "first run");
    let mut planted = w.read_cache();
    planted["executors"] = serde_json::json!([
        {"kind": "landlock", "available": false, "detail": "MARKER says no"},
        {"kind": "bubblewrap", "available": false, "detail": "MARKER says no"},
    ]);
    for x in [None, Some("landlock"), Some("bubblewrap")] {
        w.write_cache(&planted);
        let out = w.run(x);
        ok(&out, &format!("{x:?}"));
        let line = executor_line(&out);
        let expect = format!("garuda: executor {} (", x.unwrap_or("landlock"));
        assert!(
            line.starts_with(&expect) && !line.contains("MARKER") && !line.contains("cached"),
            "{x:?}: {line}"
        );
    }
}

/// Garbage, an empty file, an oversized file, another format version, a detail holding a
/// terminal escape, an executor the cache never holds (`host`), a FIFO: ignored (the run
/// probes and succeeds) and replaced by a good file. A folder at the path cannot be replaced:
/// the run still succeeds.
#[test]
fn a_malformed_cache_is_ignored_and_rewritten() {
    for x in EXECUTORS {
        let w = world();
        ok(&w.run(Some(x)), x);
        let good = w.read_cache();
        let with = |f: fn(&mut Value)| {
            let mut v = good.clone();
            f(&mut v);
            serde_json::to_vec(&v).unwrap()
        };
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("garbage", b"{not json".to_vec()),
            ("empty", Vec::new()),
            ("oversized", {
                let mut v = with(|_| {});
                v.extend(std::iter::repeat_n(b' ', 70 * 1024));
                v
            }),
            ("version", with(|v| v["version"] = 999.into())),
            (
                "escape",
                with(|v| v["executors"][0]["detail"] = "MARKER \u{1b}]0;owned\u{7}".into()),
            ),
            (
                "host",
                with(|v| {
                    v["executors"] =
                        serde_json::json!([{"kind": "host", "available": true, "detail": "MARKER"}])
                }),
            ),
        ];
        for (what, bytes) in cases {
            std::fs::write(w.cache(), &bytes).unwrap();
            let out = w.run(Some(x));
            ok(&out, what);
            let line = executor_line(&out);
            assert!(
                !line.contains("MARKER") && !line.contains("cached"),
                "{x}, {what}: {line}"
            );
            let now = w.read_cache();
            assert_eq!(now["key"], good["key"], "{x}, {what}");
            assert!(entry(&now, x).is_some(), "{x}, {what}: {now}");
        }
        // A FIFO: opening it must not block the run; it is replaced.
        std::fs::remove_file(w.cache()).unwrap();
        let made = Command::new("mkfifo").arg(w.cache()).status().unwrap();
        assert!(made.success());
        ok(&w.run(Some(x)), "fifo");
        assert!(std::fs::symlink_metadata(w.cache()).unwrap().is_file());
        // A folder: neither read nor replaced; the run is not stopped.
        std::fs::remove_file(w.cache()).unwrap();
        std::fs::create_dir(w.cache()).unwrap();
        let out = w.run(Some(x));
        ok(&out, "folder");
        assert!(!executor_line(&out).contains("cached"));
        assert!(w.cache().is_dir());
    }
}

/// A link planted at the cache's path is never written through (the rename replaces the link
/// itself) nor read (a link to a good cache with a marker is not believed); a link planted at
/// the cache folder is not used. Control: a path-based write (what a plain `fs::write` of the
/// cache would do) goes through the link and changes the target.
#[test]
fn a_link_at_the_cache_path_is_not_followed() {
    for x in EXECUTORS {
        let w = world();
        ok(&w.run(Some(x)), x);
        let mut marked = w.read_cache();
        marked["executors"][0]["detail"] = "MARKER via a link".into();
        let victim = w.base.path().join("victim.json");
        std::fs::write(&victim, serde_json::to_vec(&marked).unwrap()).unwrap();
        let before = std::fs::read(&victim).unwrap();

        std::fs::remove_file(w.cache()).unwrap();
        std::os::unix::fs::symlink(&victim, w.cache()).unwrap();
        let out = w.run(Some(x));
        ok(&out, x);
        assert!(
            !executor_line(&out).contains("MARKER"),
            "{x}: read through the link"
        );
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            before,
            "{x}: written through"
        );
        let meta = std::fs::symlink_metadata(w.cache()).unwrap();
        assert!(meta.file_type().is_file(), "{x}: the link was not replaced");

        // Control: a path-based writer follows the link.
        std::fs::remove_file(w.cache()).unwrap();
        std::os::unix::fs::symlink(&victim, w.cache()).unwrap();
        std::fs::write(w.cache(), b"through").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"through");
        std::fs::write(&victim, &before).unwrap();

        // The folder a link: not read, not written.
        let elsewhere = w.base.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::copy(&victim, elsewhere.join("executors.json")).unwrap();
        std::fs::remove_dir_all(w.garuda_home.join("cache")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, w.garuda_home.join("cache")).unwrap();
        let out = w.run(Some(x));
        ok(&out, x);
        assert!(!executor_line(&out).contains("MARKER"), "{x}");
        assert_eq!(
            std::fs::read(elsewhere.join("executors.json")).unwrap(),
            before
        );
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 1);
    }
}

/// Runs started together with no cache each write a whole file: all succeed, the file parses,
/// no temporary file is left.
#[test]
fn runs_writing_the_cache_at_once_leave_one_whole_file() {
    for x in EXECUTORS {
        let w = world();
        // One run first makes Garuda's home; then the cache goes and four runs race to write it.
        ok(&w.run(Some(x)), x);
        std::fs::remove_dir_all(w.garuda_home.join("cache")).unwrap();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (p, h, g) = (w.project.clone(), w.home.clone(), w.garuda_home.clone());
                std::thread::spawn(move || {
                    Command::new(garuda())
                        .args(["sandbox", "--executor", x, "--project"])
                        .arg(&p)
                        .args(["--", "true"])
                        .current_dir(&p)
                        .env("HOME", &h)
                        .env("GARUDA_HOME", &g)
                        .output()
                        .unwrap()
                })
            })
            .collect();
        for h in handles {
            ok(&h.join().unwrap(), x);
        }
        assert!(entry(&w.read_cache(), x).is_some());
        // `walk` is the project walk's own cache folder (policy's `walk_cache`).
        let names: Vec<String> = std::fs::read_dir(w.garuda_home.join("cache"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name != "walk")
            .collect();
        assert_eq!(names, ["executors.json"], "{x}");
        // The same runs walked the same project at once: the walk cache is one whole file too
        // (each writer renames its own temporary file over it), named by the root's hash.
        let walk: Vec<(String, Vec<u8>)> = std::fs::read_dir(w.garuda_home.join("cache/walk"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).unwrap())
            })
            .collect();
        assert_eq!(
            walk.len(),
            1,
            "{x}: {:?}",
            walk.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
        let (name, bytes) = &walk[0];
        assert!(
            name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit()),
            "{x}: {name}"
        );
        let root = w.project.canonicalize().unwrap();
        let root = root.as_os_str().as_encoded_bytes();
        assert!(bytes.starts_with(b"GRDWALK2"), "{x}");
        assert_eq!(&bytes[8..12], (root.len() as u32).to_le_bytes(), "{x}");
        assert_eq!(&bytes[12..12 + root.len()], root, "{x}");
        // Then the number of folders, the strings' length, a record of 68 bytes per folder
        // and the strings: nothing cut, nothing after.
        let at = 12 + root.len();
        let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
        let (folders, strings) = (word(at), word(at + 4));
        assert!(folders >= 2, "{x}: the project and its .garuda, {folders}");
        assert_eq!(bytes.len(), at + 8 + folders * 68 + strings, "{x}");
    }
}

/// `garuda doctor` probes live and says whether the cache agrees (and rewrites it).
#[test]
fn doctor_says_whether_the_cache_agrees() {
    let w = world();
    ok(&w.run(Some("landlock")), "run");
    let out = w.garuda(&["doctor"]);
    ok(&out, "doctor");
    // The run asked about landlock only; bubblewrap is probed live until a run or doctor
    // finds it.
    assert_eq!(
        cache_line(&out),
        format!(
            "executor probe cache ok {}: agrees (it does not list bubblewrap yet: runs probe it live); rewritten from this probe",
            w.cache().display()
        )
    );
    assert_eq!(
        cache_line(&w.garuda(&["doctor"])),
        format!(
            "executor probe cache ok {}: agrees with this probe; rewritten from this probe",
            w.cache().display()
        )
    );
    let mut stale = w.read_cache();
    stale["key"]["bwrap"]["size"] = 1.into();
    w.write_cache(&stale);
    let line = cache_line(&w.garuda(&["doctor"]));
    assert!(
        line.contains("written for another machine state (bwrap changed): ignored by runs"),
        "{line}"
    );
    assert!(
        entry(&w.read_cache(), "bubblewrap").is_some(),
        "doctor rewrote it"
    );
}

/// The doctor's cache line, spaces squeezed.
fn cache_line(out: &Output) -> String {
    text(&out.stdout)
        .lines()
        .find(|l| l.trim_start().starts_with("executor probe cache"))
        .unwrap_or_else(|| panic!("{}", text(&out.stdout)))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The shell script run in a user namespace where no namespace can be made: both sandboxes
/// are unavailable there, so `auto` falls back to the host (the default profile allows it).
const NO_NAMESPACES: &str = r#"
echo 0 > /proc/sys/user/max_user_namespaces || exit 97
run() { "$G" sandbox --verbose --project "$P" -- true 2> "$OUT/$1.err"; echo "$1=$?"; }
run control
sed -i "s|\"executors\":\[\]|$PLANT|" "$GARUDA_HOME/cache/executors.json" || exit 98
"$G" doctor > "$OUT/doctor.out"; echo "doctor=$?"
sed -i "s|\"executors\":\[\]|$PLANT|" "$GARUDA_HOME/cache/executors.json" || exit 98
run planted
if [ -e "$GARUDA_HOME/cache/executors.json" ]; then echo cache=kept; else echo cache=removed; fi
run after
"#;

/// A planted cache claiming an executor that cannot run here: the run uses it, fails at setup
/// with exit 125 and a message naming the cache, and removes the cache; the next run probes.
/// Control: without the planted cache, the same run in the same place silently gets the host
/// executor (exit 0) — what a cache that could also say "unavailable" could force anywhere.
/// `garuda doctor` there says the cache disagrees.
#[test]
fn a_planted_cache_claiming_an_unavailable_executor_fails_closed() {
    if Command::new("unshare").arg("--help").output().is_err() {
        eprintln!("NOT TESTED: fail-closed cache claims (no `unshare` to make a namespace-less user namespace)");
        assert!(
            std::env::var_os("GARUDA_ALLOW_NOT_TESTED").is_some(),
            "`unshare` (util-linux) is needed; set GARUDA_ALLOW_NOT_TESTED=1 to accept NOT TESTED"
        );
        return;
    }
    for x in EXECUTORS {
        let w = world();
        std::fs::create_dir_all(&w.garuda_home).unwrap();
        let out_dir = w.base.path().join("out");
        std::fs::create_dir(&out_dir).unwrap();
        let plant = format!(
            r#""executors":[{{"kind":"{x}","available":true,"detail":"planted by the test"}}]"#
        );
        let out = Command::new("unshare")
            .args(["-Ur", "sh", "-c", NO_NAMESPACES])
            .current_dir(&w.project)
            .env("HOME", &w.home)
            .env("GARUDA_HOME", &w.garuda_home)
            .env("G", garuda())
            .env("P", &w.project)
            .env("OUT", &out_dir)
            .env("PLANT", &plant)
            .output()
            .unwrap();
        let err = |name: &str| std::fs::read_to_string(out_dir.join(name)).unwrap_or_default();
        assert_eq!(
            text(&out.stdout),
            "control=0\ndoctor=0\nplanted=125\ncache=removed\nafter=0\n",
            "{x}: {}\ncontrol: {}\nplanted: {}",
            text(&out.stderr),
            err("control.err"),
            err("planted.err")
        );
        // Control: no cache, so the host, as the live probe found.
        assert!(
            err("control.err").contains("garuda: executor host (auto: the strongest available): "),
            "{}",
            err("control.err")
        );
        // Planted: the cache's executor, which fails at setup, and says why.
        let planted = err("planted.err");
        let cache = w.cache();
        let chosen = planted
            .lines()
            .find(|l| l.starts_with("garuda: executor "))
            .unwrap_or_else(|| panic!("{planted}"));
        // (bubblewrap's also names landlock, probed live and not available.)
        assert!(
            chosen.starts_with(&format!(
                "garuda: executor {x} (auto: the strongest available): planted by the test"
            )) && chosen.ends_with(&format!(" (cached probe: {})", cache.display())),
            "{chosen}"
        );
        let refusal = planted
            .lines()
            .find(|l| l.contains("was chosen because"))
            .unwrap_or_else(|| panic!("{planted}"));
        assert!(
            refusal.ends_with(&format!(
                " ({x} was chosen because the executor probe cache {} says it is available here; that cache is now removed, so the next run probes this machine again; `garuda doctor` shows what is available)",
                cache.display()
            )),
            "{refusal}"
        );
        assert!(
            refusal.starts_with("garuda: sandbox setup failed at ")
                || refusal.starts_with(&format!("garuda: executor {x} is not available: ")),
            "{refusal}"
        );
        assert!(!planted.contains("host executor"), "{planted}");
        // After: probed again, the host.
        assert!(
            err("after.err").contains("garuda: executor host (auto: the strongest available): "),
            "{}",
            err("after.err")
        );
        let doctor = std::fs::read_to_string(out_dir.join("doctor.out")).unwrap();
        let line = doctor
            .lines()
            .find(|l| l.trim_start().starts_with("executor probe cache"))
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            line.starts_with("executor probe cache no ")
                && line.contains(&format!(
                    ": DISAGREES: it says {x} available, which this probe finds unavailable (runs would fail at setup with exit 125); rewritten from this probe"
                )),
            "{line}"
        );
    }
}
