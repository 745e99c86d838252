//! Which API a request is for, as the `api` label says it; `decode::dialect::detect` tells it from the
//! request path.

/// The `api` label: a closed set, so clients cannot vary it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI chat completions (`…/chat/completions`).
    Chat,
    /// OpenAI text completions (`…/completions`).
    Completions,
    /// OpenAI Responses (`…/v1/responses`).
    Responses,
    /// Anthropic Messages (`…/v1/messages`).
    Messages,
    /// TGI's native `/generate_stream` and `/generate`.
    Generate,
    /// Ollama's native `/api/generate` and `/api/chat`.
    Ollama,
    /// llama.cpp server's native `/completion`.
    LlamaCpp,
    /// Speech to text (`…/v1/audio/transcriptions` and `…/v1/audio/translations`: one wire format, one
    /// kind of work, so one label).
    Transcriptions,
    /// Text to speech (`…/v1/audio/speech`): its output is audio.
    Speech,
    /// A response inside a realtime WebSocket session (vLLM's and OpenAI's `/v1/realtime`).
    Realtime,
    Other,
}

impl Api {
    pub const ALL: [Api; 11] = [
        Api::Chat,
        Api::Completions,
        Api::Responses,
        Api::Messages,
        Api::Generate,
        Api::Ollama,
        Api::LlamaCpp,
        Api::Transcriptions,
        Api::Speech,
        Api::Realtime,
        Api::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Responses => "responses",
            Api::Messages => "messages",
            Api::Generate => "generate",
            Api::Ollama => "ollama",
            Api::LlamaCpp => "llamacpp",
            Api::Transcriptions => "transcriptions",
            Api::Speech => "speech",
            Api::Realtime => "realtime",
            Api::Other => "other",
        }
    }
}
