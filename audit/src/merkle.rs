//! RFC 6962 / RFC 9162 Merkle tree hashes and consistency proofs over a session's lines.
//!
//! ```text
//! leaf  = SHA-256(0x00 || line bytes without the newline)
//! node  = SHA-256(0x01 || left || right)
//! MTH({}) = SHA-256(""),  MTH(D[n]) = node(MTH(D[0:k]), MTH(D[k:n])),  k = largest 2^i < n
//! ```
//!
//! The distinct leaf and node prefixes stop a line from posing as an inner node (second
//! preimage). [`Compact`] keeps only the right edge of the tree (O(log n) memory) and is what
//! the writer and verifier use for roots; [`Tree`] keeps every level so the writer can prove
//! to a witness that a new checkpoint extends the previous one.

use sha2::{Digest, Sha256};

use crate::util::Hash;

/// The leaf hash of a line.
pub fn leaf_hash(line: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(line);
    h.finalize().into()
}

/// The hash of an inner node.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root of the empty tree.
pub fn empty_root() -> Hash {
    Sha256::digest(b"").into()
}

/// Largest power of two strictly below `n` (`n >= 2`).
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

/// The tree root over `leaves`, by the RFC's recursive definition (reference and tests).
pub fn root_of(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => empty_root(),
        1 => leaves[0],
        n => {
            let k = split(n as u64) as usize;
            node_hash(&root_of(&leaves[..k]), &root_of(&leaves[k..]))
        }
    }
}

/// The right edge of a growing tree: the roots of its perfect subtrees, largest first.
#[derive(Debug, Clone, Default)]
pub struct Compact {
    stack: Vec<(Hash, u32)>,
    size: u64,
}

impl Compact {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends a leaf hash.
    pub fn push(&mut self, leaf: Hash) {
        let mut node = leaf;
        let mut height = 0u32;
        while let Some(&(top, h)) = self.stack.last() {
            if h != height {
                break;
            }
            self.stack.pop();
            node = node_hash(&top, &node);
            height += 1;
        }
        self.stack.push((node, height));
        self.size += 1;
    }

    /// The root over all leaves so far.
    pub fn root(&self) -> Hash {
        let mut iter = self.stack.iter().rev();
        let Some(&(mut acc, _)) = iter.next() else {
            return empty_root();
        };
        for (left, _) in iter {
            acc = node_hash(left, &acc);
        }
        acc
    }
}

/// Every level of the tree, for consistency proofs.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    levels: Vec<Vec<Hash>>,
}

impl Tree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of leaves.
    pub fn size(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.len() as u64)
    }

    /// Appends a leaf hash, completing parents as they fill.
    pub fn push(&mut self, leaf: Hash) {
        let mut node = leaf;
        let mut level = 0;
        loop {
            if self.levels.len() == level {
                self.levels.push(Vec::new());
            }
            self.levels[level].push(node);
            let len = self.levels[level].len();
            if len % 2 == 1 {
                break;
            }
            node = node_hash(&self.levels[level][len - 2], &self.levels[level][len - 1]);
            level += 1;
        }
    }

    /// MTH of leaves `[start, end)`, where `start` is a multiple of a power of two at least
    /// `end - start` (true of every range a consistency proof asks for).
    fn subtree(&self, start: u64, end: u64) -> Hash {
        let n = end - start;
        if n == 0 {
            return empty_root();
        }
        if n.is_power_of_two() && start.is_multiple_of(n) {
            let level = n.trailing_zeros() as usize;
            if let Some(h) = self
                .levels
                .get(level)
                .and_then(|l| l.get((start >> level) as usize))
            {
                return *h;
            }
        }
        if n == 1 {
            return self
                .levels
                .first()
                .and_then(|l| l.get(start as usize))
                .copied()
                .unwrap_or_else(empty_root);
        }
        let k = split(n);
        node_hash(
            &self.subtree(start, start + k),
            &self.subtree(start + k, end),
        )
    }

    /// The root at tree size `size` (`size <= self.size()`).
    pub fn root_at(&self, size: u64) -> Hash {
        self.subtree(0, size.min(self.size()))
    }

    /// The RFC 9162 §2.1.4.1 consistency proof from size `old` to size `new`
    /// (`0 < old <= new <= self.size()`; empty when `old == new` or `old == 0`).
    pub fn consistency_proof(&self, old: u64, new: u64) -> Vec<Hash> {
        let new = new.min(self.size());
        let mut proof = Vec::new();
        if old == 0 || old >= new {
            return proof;
        }
        self.subproof(old, 0, new, true, &mut proof);
        proof
    }

    fn subproof(&self, m: u64, start: u64, end: u64, whole: bool, out: &mut Vec<Hash>) {
        let n = end - start;
        if m == n {
            if !whole {
                out.push(self.subtree(start, end));
            }
            return;
        }
        let k = split(n);
        if m <= k {
            self.subproof(m, start, start + k, whole, out);
            out.push(self.subtree(start + k, end));
        } else {
            self.subproof(m - k, start + k, end, false, out);
            out.push(self.subtree(start, start + k));
        }
    }
}

/// Checks an RFC 9162 §2.1.4.2 consistency proof: that the tree of size `new` with root
/// `new_root` extends the tree of size `old` with root `old_root`.
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> bool {
    if old > new {
        return false;
    }
    if old == new {
        return proof.is_empty() && old_root == new_root;
    }
    if old == 0 {
        // Every tree extends the empty one; the tlog-witness protocol sends no proof.
        return proof.is_empty();
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    let mut fn_ = old - 1;
    let mut sn = new - 1;
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let mut fr = *first;
    let mut sr = *first;
    for c in rest {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    fr == *old_root && sr == *new_root && sn == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(format!("line {i}").as_bytes()))
            .collect()
    }

    #[test]
    fn compact_and_tree_match_the_definition() {
        let all = leaves(70);
        let mut c = Compact::new();
        let mut t = Tree::new();
        assert_eq!(c.root(), empty_root());
        for (i, l) in all.iter().enumerate() {
            c.push(*l);
            t.push(*l);
            let want = root_of(&all[..=i]);
            assert_eq!(c.root(), want, "compact at {}", i + 1);
            assert_eq!(t.root_at(i as u64 + 1), want, "tree at {}", i + 1);
        }
        for size in 0..=70u64 {
            assert_eq!(t.root_at(size), root_of(&all[..size as usize]));
        }
    }

    #[test]
    fn rfc6962_known_vectors() {
        // The RFC 6962 test tree (certificate-transparency-go merkle test data): leaves are
        // "", 0x00, 0x10, 0x2021, 0x3031, 0x40414243, 0x5051525354555657, 0x606162...6f.
        let inputs: [&[u8]; 8] = [
            b"",
            &[0x00],
            &[0x10],
            &[0x20, 0x21],
            &[0x30, 0x31],
            &[0x40, 0x41, 0x42, 0x43],
            &[0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57],
            &[
                0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d,
                0x6e, 0x6f,
            ],
        ];
        let ls: Vec<Hash> = inputs.iter().map(|d| leaf_hash(d)).collect();
        assert_eq!(
            crate::util::hex(&root_of(&ls[..1])),
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
        );
        assert_eq!(
            crate::util::hex(&root_of(&ls)),
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
        );
    }

    #[test]
    fn consistency_proofs_verify_and_reject() {
        let all = leaves(40);
        let mut t = Tree::new();
        for l in &all {
            t.push(*l);
        }
        for new in 1..=40u64 {
            for old in 1..=new {
                let proof = t.consistency_proof(old, new);
                let (ro, rn) = (t.root_at(old), t.root_at(new));
                assert!(
                    verify_consistency(old, new, &ro, &rn, &proof),
                    "{old}->{new}"
                );
                if old < new {
                    let bad_root = leaf_hash(b"other");
                    assert!(!verify_consistency(old, new, &bad_root, &rn, &proof));
                    assert!(!verify_consistency(old, new, &ro, &bad_root, &proof));
                    if !proof.is_empty() {
                        let mut p = proof.clone();
                        p[0][0] ^= 1;
                        assert!(!verify_consistency(old, new, &ro, &rn, &p), "{old}->{new}");
                        assert!(!verify_consistency(
                            old,
                            new,
                            &ro,
                            &rn,
                            &proof[..proof.len() - 1]
                        ));
                    }
                }
            }
        }
        assert!(verify_consistency(0, 5, &empty_root(), &t.root_at(5), &[]));
        assert!(!verify_consistency(6, 5, &t.root_at(6), &t.root_at(5), &[]));
    }
}
