//! Model clients: the provider-neutral conversation types and, per provider, a client that
//! speaks its streaming wire format.

pub mod anthropic;
pub mod client;
pub mod decode;
pub mod openai;
pub mod sse;
pub mod types;

pub use client::{ModelClient, RetryPolicy};
pub use types::{
    Attempt, Block, FinishReason, Message, Model, ModelError, ModelRequest, ModelResponse, Role,
    StreamEvent, TokenUsage, Tool,
};
