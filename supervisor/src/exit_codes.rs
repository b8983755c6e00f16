//! The exit codes `garuda sandbox` gives its own outcomes (beside the command's), shared by
//! the CLI and by the agent's tool host, which reads them from a child `garuda sandbox`.

/// Exit code when Garuda itself cannot set up the sandbox (as `env(1)` and `timeout(1)` use).
pub const SETUP_FAILED: i32 = 125;
/// Exit code of a staged command whose change was discarded without `--discard`: at the
/// question, or because there was no terminal to ask on. The project did not change.
pub const STAGED_DISCARDED: i32 = 121;
/// Exit code of a staged command whose apply Garuda refused: an incomplete list, a link out of
/// the project, a conflict, a staged file changed after it was shown, a path outside the
/// project, a change to `.garuda/` with `--apply` alone, a change to a sensitive file without
/// `--apply-sensitive`. The project did not change.
pub const APPLY_REFUSED: i32 = 122;
/// Exit code of a staged command whose apply failed: an I/O error before the commit point
/// (the project did not change), or after it (the journal finishes the apply at the next
/// start; until then the project may hold part of the change).
pub const APPLY_FAILED: i32 = 123;
