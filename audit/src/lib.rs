//! Garuda's audit log.
//!
//! Planned (see `docs/hld.md` and the audit issue): one JSONL file per session, each line
//! carrying an HMAC-SHA256 under a key that evolves one way per epoch, `seal` lines that close
//! every epoch (empty ones too) with an RFC 6962 Merkle root, a checkpoint file per session in
//! the C2SP tlog-checkpoint note format, an optional witness, and `garuda audit verify` that
//! reports every problem with file, line, seq, epoch and a code.
//!
//! Status: a stub. Nothing is recorded yet; no part of Garuda may claim an audit trail until
//! this crate is built.
#![forbid(unsafe_code)]
