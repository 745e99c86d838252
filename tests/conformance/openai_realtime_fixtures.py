"""Writes the OpenAI Realtime / audio event sequences in tests/fixtures/realtime/ and tests/fixtures/audio/
(the openai-* files), and checks every event against the openai Python SDK's own types: the GA types
(openai.types.realtime.RealtimeServerEvent / RealtimeClientEvent), the beta types
(openai.types.beta.realtime.*) and the audio stream types (openai.types.audio.TranscriptionStreamEvent).
These are written from the SDK's types and OpenAI's documentation, not captured from api.openai.com
(no key, no network): ids are made up in OpenAI's shapes, audio is silence, token counts are
illustrative but consistent (total = input + output, details add up to their totals).

    python openai_realtime_fixtures.py OUT_DIR_REALTIME OUT_DIR_AUDIO

Runs in the clients' virtualenv (openai SDK).
"""

import base64
import json
import os
import random
import string
import sys

RNG = random.Random(42)


def oid(prefix):
    # OpenAI's ids: a prefix and 21 base62 characters (e.g. event_C1PSbxm5uMU7Jwc2alPcc).
    return prefix + "_" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(21))


def ev():
    return oid("event")


def silence_b64(ms, rate=24000):
    # PCM16 mono: the GA default output/input format is audio/pcm at 24 kHz (beta: "pcm16", 24 kHz).
    return base64.b64encode(b"\x00\x00" * (rate * ms // 1000)).decode()


def c2s(event, note=None):
    line = {"dir": "c2s", "event": event}
    if note:
        line["note"] = note
    return line


def s2c(event, note=None):
    line = {"dir": "s2c", "event": event}
    if note:
        line["note"] = note
    return line


# ------------------------------------------------------------------------------------------------ GA


def ga_session(session_id, model, modalities, vad=False):
    return {
        "type": "realtime", "model": model,
        "output_modalities": modalities, "instructions": "You are a helpful assistant.",
        "tools": [], "tool_choice": "auto", "max_output_tokens": "inf", "tracing": None,
        "prompt": None, "include": None,
        "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 24000}, "transcription": None,
                      "noise_reduction": None,
                      "turn_detection": ({"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                                          "silence_duration_ms": 200, "idle_timeout_ms": None,
                                          "create_response": True, "interrupt_response": True}
                                         if vad else None)},
            "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin", "speed": 1.0},
        },
    }


def ga_response(resp_id, conv_id, modalities, status, output, usage, status_details=None):
    return {
        "object": "realtime.response", "id": resp_id, "status": status, "status_details": status_details,
        "output": output, "conversation_id": conv_id, "output_modalities": modalities,
        "max_output_tokens": "inf",
        "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin"}},
        "usage": usage, "metadata": None,
    }


def ga_usage(in_text, in_audio, out_text, out_audio, cached=0):
    return {
        "total_tokens": in_text + in_audio + out_text + out_audio,
        "input_tokens": in_text + in_audio,
        "output_tokens": out_text + out_audio,
        "input_token_details": {"text_tokens": in_text, "audio_tokens": in_audio, "image_tokens": 0,
                                "cached_tokens": cached,
                                "cached_tokens_details": {"text_tokens": cached, "audio_tokens": 0,
                                                          "image_tokens": 0}},
        "output_token_details": {"text_tokens": out_text, "audio_tokens": out_audio},
    }


def ga_text():
    """A text-only turn: the client adds a user text item and asks for a response (t_trigger =
    response.create), the server streams response.output_text.delta (t_first, t_i) and ends with
    response.done and its usage (t_done)."""
    sess, conv, resp, user_item, item = oid("sess"), oid("conv"), oid("resp"), oid("item"), oid("item")
    model = "gpt-realtime"
    deltas = ["Hello", "!", " How", " can I", " help?"]
    text = "".join(deltas)
    done_item = {"id": item, "type": "message", "object": "realtime.item", "status": "completed",
                 "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    user = {"id": user_item, "type": "message", "object": "realtime.item", "status": "completed", "role": "user",
            "content": [{"type": "input_text", "text": "Say hello."}]}
    out = [
        s2c({"type": "session.created", "event_id": ev(), "session": ga_session(sess, model, ["audio"])},
            "first server event after the 101"),
        c2s({"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"]}}),
        s2c({"type": "session.updated", "event_id": ev(), "session": ga_session(sess, model, ["text"])}),
        c2s({"type": "conversation.item.create",
             "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}}),
        s2c({"type": "conversation.item.added", "event_id": ev(), "previous_item_id": None, "item": user}),
        s2c({"type": "conversation.item.done", "event_id": ev(), "previous_item_id": None, "item": user}),
        c2s({"type": "response.create"}, "t_trigger"),
        s2c({"type": "response.created", "event_id": ev(),
             "response": ga_response(resp, conv, ["text"], "in_progress", [], None)}),
        s2c({"type": "response.output_item.added", "event_id": ev(), "response_id": resp, "output_index": 0,
             "item": {**done_item, "status": "in_progress", "content": []}}),
        s2c({"type": "conversation.item.added", "event_id": ev(), "previous_item_id": user_item,
             "item": {**done_item, "status": "in_progress", "content": []}}),
        s2c({"type": "response.content_part.added", "event_id": ev(), "response_id": resp, "item_id": item,
             "output_index": 0, "content_index": 0, "part": {"type": "text", "text": ""}}),
    ]
    for i, d in enumerate(deltas):
        out.append(s2c({"type": "response.output_text.delta", "event_id": ev(), "response_id": resp, "item_id": item,
                        "output_index": 0, "content_index": 0, "delta": d}, "t_first" if i == 0 else None))
    out += [
        s2c({"type": "response.output_text.done", "event_id": ev(), "response_id": resp, "item_id": item,
             "output_index": 0, "content_index": 0, "text": text}),
        s2c({"type": "response.content_part.done", "event_id": ev(), "response_id": resp, "item_id": item,
             "output_index": 0, "content_index": 0, "part": {"type": "text", "text": text}}),
        s2c({"type": "response.output_item.done", "event_id": ev(), "response_id": resp, "output_index": 0,
             "item": done_item}),
        s2c({"type": "conversation.item.done", "event_id": ev(), "previous_item_id": user_item, "item": done_item}),
        s2c({"type": "response.done", "event_id": ev(),
             "response": ga_response(resp, conv, ["text"], "completed", [done_item], ga_usage(118, 0, 7, 0))},
            "t_done; usage: N = output_tokens 7 (text 7, audio 0), input 118"),
    ]
    return out


def ga_audio_turn(resp, conv, item, prev_item, transcript_deltas, chunks, usage, trigger_note, modalities=("audio",),
                  status="completed", status_details=None, cut=None):
    """One audio response: the transcript and the audio stream interleaved, as the server sends them.
    `cut` stops after that many audio deltas (a cancelled response)."""
    transcript = "".join(transcript_deltas)
    out = [
        s2c({"type": "response.created", "event_id": ev(),
             "response": ga_response(resp, conv, list(modalities), "in_progress", [], None)}, trigger_note),
        s2c({"type": "response.output_item.added", "event_id": ev(), "response_id": resp, "output_index": 0,
             "item": {"id": item, "type": "message", "object": "realtime.item", "status": "in_progress",
                      "role": "assistant", "content": []}}),
        s2c({"type": "conversation.item.added", "event_id": ev(), "previous_item_id": prev_item,
             "item": {"id": item, "type": "message", "object": "realtime.item", "status": "in_progress",
                      "role": "assistant", "content": []}}),
        s2c({"type": "response.content_part.added", "event_id": ev(), "response_id": resp, "item_id": item,
             "output_index": 0, "content_index": 0, "part": {"type": "audio", "transcript": ""}}),
    ]
    first = True
    sent_t, sent_a = [], 0
    n = max(len(transcript_deltas), chunks)
    for i in range(n):
        if cut is not None and sent_a >= cut:
            break
        if i < len(transcript_deltas):
            out.append(s2c({"type": "response.output_audio_transcript.delta", "event_id": ev(), "response_id": resp,
                            "item_id": item, "output_index": 0, "content_index": 0, "delta": transcript_deltas[i]},
                           "t_first" if first else None))
            sent_t.append(transcript_deltas[i])
            first = False
        if i < chunks:
            out.append(s2c({"type": "response.output_audio.delta", "event_id": ev(), "response_id": resp,
                            "item_id": item, "output_index": 0, "content_index": 0, "delta": silence_b64(40)}))
            sent_a += 1
    said = "".join(sent_t)
    item_status = "completed" if status == "completed" else "incomplete"
    done_item = {"id": item, "type": "message", "object": "realtime.item", "status": item_status, "role": "assistant",
                 "content": [{"type": "output_audio", "transcript": said}]}
    if status == "completed":
        out += [
            s2c({"type": "response.output_audio.done", "event_id": ev(), "response_id": resp, "item_id": item,
                 "output_index": 0, "content_index": 0}),
            s2c({"type": "response.output_audio_transcript.done", "event_id": ev(), "response_id": resp,
                 "item_id": item, "output_index": 0, "content_index": 0, "transcript": transcript}),
        ]
    out += [
        s2c({"type": "response.content_part.done", "event_id": ev(), "response_id": resp, "item_id": item,
             "output_index": 0, "content_index": 0, "part": {"type": "audio", "transcript": said}}),
        s2c({"type": "response.output_item.done", "event_id": ev(), "response_id": resp, "output_index": 0,
             "item": done_item}),
        s2c({"type": "conversation.item.done", "event_id": ev(), "previous_item_id": prev_item, "item": done_item}),
        s2c({"type": "response.done", "event_id": ev(),
             "response": ga_response(resp, conv, list(modalities), status, [done_item], usage, status_details)},
            "t_done"),
    ]
    return out


def ga_audio():
    """Text in, audio out: response.create (t_trigger); the first output event is an
    response.output_audio_transcript.delta or response.output_audio.delta, whichever comes first (t_first);
    response.done's usage gives audio and text output tokens apart."""
    sess, conv, resp, user_item, item = oid("sess"), oid("conv"), oid("resp"), oid("item"), oid("item")
    model = "gpt-realtime"
    user = {"id": user_item, "type": "message", "object": "realtime.item", "status": "completed", "role": "user",
            "content": [{"type": "input_text", "text": "Say hello."}]}
    out = [
        s2c({"type": "session.created", "event_id": ev(), "session": ga_session(sess, model, ["audio"])}),
        c2s({"type": "conversation.item.create",
             "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}}),
        s2c({"type": "conversation.item.added", "event_id": ev(), "previous_item_id": None, "item": user}),
        s2c({"type": "conversation.item.done", "event_id": ev(), "previous_item_id": None, "item": user}),
        c2s({"type": "response.create", "response": {"output_modalities": ["audio"]}}, "t_trigger"),
    ]
    out += ga_audio_turn(resp, conv, item, user_item, ["Hello", " there", "!"], 5, ga_usage(118, 0, 9, 31), None)
    return out


def ga_server_vad():
    """Audio in with server VAD (the default turn detection): the client only appends audio; the server
    detects the end of speech, commits the buffer itself (input_audio_buffer.committed = t_trigger, no
    response.create), transcribes the input if asked (its own usage, on
    conversation.item.input_audio_transcription.completed) and answers with audio; then a second turn."""
    sess, conv = oid("sess"), oid("conv")
    model = "gpt-realtime"
    session = ga_session(sess, model, ["audio"], vad=True)
    session["audio"]["input"]["transcription"] = {"model": "gpt-4o-transcribe", "language": None, "prompt": None}
    out = [
        s2c({"type": "session.created", "event_id": ev(), "session": ga_session(sess, model, ["audio"], vad=True)}),
        c2s({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
            "transcription": {"model": "gpt-4o-transcribe"},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 200}}}}}),
        s2c({"type": "session.updated", "event_id": ev(), "session": session}),
    ]
    prev = None
    for turn in range(2):
        user_item, resp, item = oid("item"), oid("resp"), oid("item")
        for _ in range(3):
            out.append(c2s({"type": "input_audio_buffer.append", "audio": silence_b64(100)}))
        out.append(s2c({"type": "input_audio_buffer.speech_started", "event_id": ev(), "audio_start_ms": 1000 + turn * 4000,
                        "item_id": user_item}))
        for _ in range(3):
            out.append(c2s({"type": "input_audio_buffer.append", "audio": silence_b64(100)}))
        out.append(s2c({"type": "input_audio_buffer.speech_stopped", "event_id": ev(), "audio_end_ms": 2400 + turn * 4000,
                        "item_id": user_item}))
        out.append(s2c({"type": "input_audio_buffer.committed", "event_id": ev(), "previous_item_id": prev,
                        "item_id": user_item}, "t_trigger (server VAD: no response.create)"))
        user = {"id": user_item, "type": "message", "object": "realtime.item", "status": "completed", "role": "user",
                "content": [{"type": "input_audio", "transcript": None}]}
        out.append(s2c({"type": "conversation.item.added", "event_id": ev(), "previous_item_id": prev, "item": user}))
        out.append(s2c({"type": "conversation.item.done", "event_id": ev(), "previous_item_id": prev, "item": user}))
        if turn == 0:
            turn_events = ga_audio_turn(resp, conv, item, user_item, ["Sure", ",", " go", " on", "."], 6,
                                        ga_usage(30, 42, 11, 46), None)
            # The input transcription runs beside the response; its delta/completed events carry their own
            # usage (the transcription model's), apart from response.done's.
            tr = [s2c({"type": "conversation.item.input_audio_transcription.delta", "event_id": ev(),
                       "item_id": user_item, "content_index": 0, "delta": "Hello"}),
                  s2c({"type": "conversation.item.input_audio_transcription.completed", "event_id": ev(),
                       "item_id": user_item, "content_index": 0, "transcript": "Hello",
                       "usage": {"type": "tokens", "input_tokens": 14, "output_tokens": 2, "total_tokens": 16,
                                 "input_token_details": {"text_tokens": 0, "audio_tokens": 14}}},
                      "the input transcription's own usage: not the response's")]
            out += turn_events[:6] + tr + turn_events[6:]
        else:
            out += ga_audio_turn(resp, conv, item, user_item, ["Ok", "."], 2, ga_usage(95, 84, 2, 8), None)
        prev = item
    return out


def ga_barge_in():
    """A response cut by the user speaking again (server VAD with interrupt_response): response.done with
    status "cancelled", status_details {type: "cancelled", reason: "turn_detected"}; its usage counts what
    was generated before the cut."""
    sess, conv, resp, item, user_item = oid("sess"), oid("conv"), oid("resp"), oid("item"), oid("item")
    model = "gpt-realtime"
    out = [
        s2c({"type": "session.created", "event_id": ev(), "session": ga_session(sess, model, ["audio"], vad=True)}),
    ]
    for _ in range(3):
        out.append(c2s({"type": "input_audio_buffer.append", "audio": silence_b64(100)}))
    out += [
        s2c({"type": "input_audio_buffer.speech_started", "event_id": ev(), "audio_start_ms": 500, "item_id": user_item}),
        s2c({"type": "input_audio_buffer.speech_stopped", "event_id": ev(), "audio_end_ms": 1800, "item_id": user_item}),
        s2c({"type": "input_audio_buffer.committed", "event_id": ev(), "previous_item_id": None, "item_id": user_item},
            "t_trigger"),
    ]
    user = {"id": user_item, "type": "message", "object": "realtime.item", "status": "completed", "role": "user",
            "content": [{"type": "input_audio", "transcript": None}]}
    out += [s2c({"type": "conversation.item.added", "event_id": ev(), "previous_item_id": None, "item": user}),
            s2c({"type": "conversation.item.done", "event_id": ev(), "previous_item_id": None, "item": user})]
    turn = ga_audio_turn(resp, conv, item, user_item, ["Let", " me", " tell", " you", " a", " story"], 8,
                         ga_usage(20, 40, 2, 6), None, status="cancelled",
                         status_details={"type": "cancelled", "reason": "turn_detected"}, cut=2)
    # The user speaks again mid-response: speech_started, then the cancelled response's closing events.
    idx = next(i for i, l in enumerate(turn) if l["event"]["type"] == "response.content_part.done")
    next_user = oid("item")
    for _ in range(2):
        turn.insert(idx, c2s({"type": "input_audio_buffer.append", "audio": silence_b64(100)}))
        idx += 1
    turn.insert(idx, s2c({"type": "input_audio_buffer.speech_started", "event_id": ev(), "audio_start_ms": 2600,
                          "item_id": next_user}, "barge-in: the server cancels the running response"))
    out += turn
    out.append(c2s({"type": "conversation.item.truncate", "item_id": item, "content_index": 0, "audio_end_ms": 80},
                   "the client tells the server how much audio it played"))
    out.append(s2c({"type": "conversation.item.truncated", "event_id": ev(), "item_id": item, "content_index": 0,
                    "audio_end_ms": 80}))
    return out


def ga_transcription_session():
    """A transcription-only session (GA: /v1/realtime?intent=transcription, session type "transcription"):
    no response.* events; each committed buffer yields conversation.item.input_audio_transcription.delta
    events and one .completed with usage. The closest analogue of vLLM's /v1/realtime."""
    sess, user_item = oid("sess"), oid("item")
    session = {"type": "transcription", "include": None,
               "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                                   "transcription": {"model": "gpt-4o-transcribe", "language": "en", "prompt": None},
                                   "noise_reduction": None, "turn_detection": None}}}
    out = [
        s2c({"type": "session.created", "event_id": ev(), "session": session}),
        c2s({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "transcription": {"model": "gpt-4o-transcribe", "language": "en"}, "turn_detection": None}}}}),
        s2c({"type": "session.updated", "event_id": ev(), "session": session}),
    ]
    for _ in range(3):
        out.append(c2s({"type": "input_audio_buffer.append", "audio": silence_b64(100)}))
    out += [
        c2s({"type": "input_audio_buffer.commit"}, "t_trigger"),
        s2c({"type": "input_audio_buffer.committed", "event_id": ev(), "previous_item_id": None, "item_id": user_item}),
        s2c({"type": "conversation.item.added", "event_id": ev(), "previous_item_id": None,
             "item": {"id": user_item, "type": "message", "object": "realtime.item", "status": "completed",
                      "role": "user", "content": [{"type": "input_audio", "transcript": None}]}}),
    ]
    for i, d in enumerate(["The", " quick", " brown", " fox"]):
        out.append(s2c({"type": "conversation.item.input_audio_transcription.delta", "event_id": ev(),
                        "item_id": user_item, "content_index": 0, "delta": d}, "t_first" if i == 0 else None))
    out.append(s2c({"type": "conversation.item.input_audio_transcription.completed", "event_id": ev(),
                    "item_id": user_item, "content_index": 0, "transcript": "The quick brown fox",
                    "usage": {"type": "tokens", "input_tokens": 21, "output_tokens": 5, "total_tokens": 26,
                              "input_token_details": {"text_tokens": 0, "audio_tokens": 21}}}, "t_done"))
    return out


def ga_errors():
    """The error event: its own event_id, and error.event_id naming the client event that caused it when
    the client gave one. The session stays open."""
    sess = oid("sess")
    return [
        s2c({"type": "session.created", "event_id": ev(), "session": ga_session(sess, "gpt-realtime", ["audio"])}),
        c2s({"type": "response.cancel", "event_id": "client_evt_1"}),
        s2c({"type": "error", "event_id": ev(), "error": {
            "type": "invalid_request_error", "code": "response_cancel_not_active",
            "message": "Cancellation failed: no active response found", "param": None,
            "event_id": "client_evt_1"}}),
        c2s({"type": "input_audio_buffer.commit", "event_id": "client_evt_2"}),
        s2c({"type": "error", "event_id": ev(), "error": {
            "type": "invalid_request_error", "code": "input_audio_buffer_commit_empty",
            "message": "Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, "
                       "but buffer only has 0.00ms of audio.", "param": None, "event_id": "client_evt_2"}}),
    ]


# ---------------------------------------------------------------------------------------------- beta


def beta_session(session_id, model, modalities):
    return {"id": session_id, "model": model, "modalities": modalities,
            "instructions": "You are a helpful assistant.", "voice": "alloy", "input_audio_format": "pcm16",
            "output_audio_format": "pcm16", "input_audio_transcription": None,
            "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                               "silence_duration_ms": 200, "create_response": True, "interrupt_response": True},
            "tools": [], "tool_choice": "auto", "temperature": 0.8, "max_response_output_tokens": "inf",
            "speed": 1.1, "tracing": None}


def beta_response(resp, conv, modalities, status, output, usage):
    return {"object": "realtime.response", "id": resp, "status": status, "status_details": None, "output": output,
            "conversation_id": conv, "modalities": modalities, "voice": "alloy", "output_audio_format": "pcm16",
            "temperature": 0.8, "max_output_tokens": "inf", "usage": usage, "metadata": None}


def beta_usage(in_text, in_audio, out_text, out_audio, cached=0):
    return {"total_tokens": in_text + in_audio + out_text + out_audio, "input_tokens": in_text + in_audio,
            "output_tokens": out_text + out_audio,
            "input_token_details": {"text_tokens": in_text, "audio_tokens": in_audio, "cached_tokens": cached},
            "output_token_details": {"text_tokens": out_text, "audio_tokens": out_audio}}


def beta(audio):
    """The beta protocol (OpenAI-Beta: realtime=v1): response.text.delta / response.audio.delta /
    response.audio_transcript.delta instead of the GA names; conversation.item.created instead of
    .added/.done; the response object has `modalities`, `voice`, `output_audio_format`, `temperature`."""
    sess, conv, resp, user_item, item = oid("sess"), oid("conv"), oid("resp"), oid("item"), oid("item")
    model = "gpt-4o-realtime-preview-2025-06-03"
    modalities = ["audio", "text"] if audio else ["text"]
    user = {"id": user_item, "object": "realtime.item", "type": "message", "status": "completed", "role": "user",
            "content": [{"type": "input_text", "text": "Say hello."}]}
    out = [
        s2c({"type": "session.created", "event_id": ev(), "session": beta_session(sess, model, ["text", "audio"])}),
        c2s({"type": "session.update", "session": {"modalities": modalities}}),
        s2c({"type": "session.updated", "event_id": ev(), "session": beta_session(sess, model, modalities)}),
        c2s({"type": "conversation.item.create",
             "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}}),
        s2c({"type": "conversation.item.created", "event_id": ev(), "previous_item_id": None, "item": user}),
        c2s({"type": "response.create"}, "t_trigger"),
        s2c({"type": "response.created", "event_id": ev(),
             "response": beta_response(resp, conv, modalities, "in_progress", [], None)}),
        s2c({"type": "rate_limits.updated", "event_id": ev(), "rate_limits": [
            {"name": "requests", "limit": 5000, "remaining": 4999, "reset_seconds": 0.012},
            {"name": "tokens", "limit": 400000, "remaining": 399000, "reset_seconds": 0.15}]}),
        s2c({"type": "response.output_item.added", "event_id": ev(), "response_id": resp, "output_index": 0,
             "item": {"id": item, "object": "realtime.item", "type": "message", "status": "in_progress",
                      "role": "assistant", "content": []}}),
        s2c({"type": "conversation.item.created", "event_id": ev(), "previous_item_id": user_item,
             "item": {"id": item, "object": "realtime.item", "type": "message", "status": "in_progress",
                      "role": "assistant", "content": []}}),
    ]
    deltas = ["Hello", " there", "!"]
    text = "".join(deltas)
    if audio:
        out.append(s2c({"type": "response.content_part.added", "event_id": ev(), "response_id": resp, "item_id": item,
                        "output_index": 0, "content_index": 0, "part": {"type": "audio", "transcript": ""}}))
        for i, d in enumerate(deltas):
            out.append(s2c({"type": "response.audio_transcript.delta", "event_id": ev(), "response_id": resp,
                            "item_id": item, "output_index": 0, "content_index": 0, "delta": d},
                           "t_first" if i == 0 else None))
            out.append(s2c({"type": "response.audio.delta", "event_id": ev(), "response_id": resp, "item_id": item,
                            "output_index": 0, "content_index": 0, "delta": silence_b64(40)}))
        out += [
            s2c({"type": "response.audio.done", "event_id": ev(), "response_id": resp, "item_id": item,
                 "output_index": 0, "content_index": 0}),
            s2c({"type": "response.audio_transcript.done", "event_id": ev(), "response_id": resp, "item_id": item,
                 "output_index": 0, "content_index": 0, "transcript": text}),
            s2c({"type": "response.content_part.done", "event_id": ev(), "response_id": resp, "item_id": item,
                 "output_index": 0, "content_index": 0, "part": {"type": "audio", "transcript": text}}),
        ]
        content = [{"type": "audio", "transcript": text}]
        usage = beta_usage(118, 0, 9, 31)
    else:
        out.append(s2c({"type": "response.content_part.added", "event_id": ev(), "response_id": resp, "item_id": item,
                        "output_index": 0, "content_index": 0, "part": {"type": "text", "text": ""}}))
        for i, d in enumerate(deltas):
            out.append(s2c({"type": "response.text.delta", "event_id": ev(), "response_id": resp, "item_id": item,
                            "output_index": 0, "content_index": 0, "delta": d}, "t_first" if i == 0 else None))
        out += [
            s2c({"type": "response.text.done", "event_id": ev(), "response_id": resp, "item_id": item,
                 "output_index": 0, "content_index": 0, "text": text}),
            s2c({"type": "response.content_part.done", "event_id": ev(), "response_id": resp, "item_id": item,
                 "output_index": 0, "content_index": 0, "part": {"type": "text", "text": text}}),
        ]
        content = [{"type": "text", "text": text}]
        usage = beta_usage(118, 0, 4, 0)
    done_item = {"id": item, "object": "realtime.item", "type": "message", "status": "completed", "role": "assistant",
                 "content": content}
    out += [
        s2c({"type": "response.output_item.done", "event_id": ev(), "response_id": resp, "output_index": 0,
             "item": done_item}),
        s2c({"type": "response.done", "event_id": ev(),
             "response": beta_response(resp, conv, modalities, "completed", [done_item], usage)}, "t_done"),
    ]
    return out


# ------------------------------------------------------------------------------------------- HTTP audio


def sse(events):
    """OpenAI's audio streams: `data: {json}` lines and a blank line each, no `event:` lines, and no
    [DONE] terminator (the SDK's Stream stops on [DONE] if one comes, but these endpoints end with their
    done event)."""
    return "".join(f"data: {json.dumps(e, separators=(',', ':'))}\n\n" for e in events)


def transcription_events():
    deltas = ["The", " quick", " brown", " fox", "."]
    evs = [{"type": "transcript.text.delta", "delta": d, "logprobs": None} for d in deltas]
    evs.append({"type": "transcript.text.done", "text": "".join(deltas), "logprobs": None,
                "usage": {"type": "tokens", "input_tokens": 14, "output_tokens": 5, "total_tokens": 19,
                          "input_token_details": {"text_tokens": 0, "audio_tokens": 14}}})
    return evs


def speech_events():
    evs = [{"type": "speech.audio.delta", "audio": silence_b64(100)} for _ in range(3)]
    evs.append({"type": "speech.audio.done", "usage": {"input_tokens": 6, "output_tokens": 42, "total_tokens": 48}})
    return evs


# ------------------------------------------------------------------------------------------- checks


def check(lines, beta_types):
    from pydantic import TypeAdapter

    if beta_types:
        from openai.types.beta.realtime.realtime_client_event import RealtimeClientEvent
        from openai.types.beta.realtime.realtime_server_event import RealtimeServerEvent
    else:
        from openai.types.realtime.realtime_client_event import RealtimeClientEvent
        from openai.types.realtime.realtime_server_event import RealtimeServerEvent
    server, client = TypeAdapter(RealtimeServerEvent), TypeAdapter(RealtimeClientEvent)
    for line in lines:
        m = (client if line["dir"] == "c2s" else server).validate_python(line["event"])
        no_extras(m, line["event"]["type"])


def no_extras(m, where):
    """The SDK's models accept unknown fields; a fixture must not use any (a misspelt field would pass)."""
    from pydantic import BaseModel

    if isinstance(m, BaseModel):
        if m.model_extra:
            raise SystemExit(f"{where}: fields the SDK does not know: {sorted(m.model_extra)}")
        for k in type(m).model_fields:
            no_extras(getattr(m, k), f"{where}.{k}")
    elif isinstance(m, (list, tuple)):
        for i, x in enumerate(m):
            no_extras(x, f"{where}[{i}]")


def check_audio():
    from pydantic import TypeAdapter
    from openai.types.audio.transcription_stream_event import TranscriptionStreamEvent

    ta = TypeAdapter(TranscriptionStreamEvent)
    for e in transcription_events():
        no_extras(ta.validate_python(e), e["type"])


def write(lines, path):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def main(rt_dir, audio_dir):
    os.makedirs(rt_dir, exist_ok=True)
    os.makedirs(audio_dir, exist_ok=True)
    files = {
        "openai-ga-text.jsonl": (ga_text(), False),
        "openai-ga-audio.jsonl": (ga_audio(), False),
        "openai-ga-server-vad.jsonl": (ga_server_vad(), False),
        "openai-ga-barge-in.jsonl": (ga_barge_in(), False),
        "openai-ga-transcription-session.jsonl": (ga_transcription_session(), False),
        "openai-ga-errors.jsonl": (ga_errors(), False),
        "openai-beta-text.jsonl": (beta(False), True),
        "openai-beta-audio.jsonl": (beta(True), True),
    }
    for name, (lines, is_beta) in files.items():
        check(lines, is_beta)
        write(lines, os.path.join(rt_dir, name))
        print(f"{name}: {len(lines)} events, checked against the SDK's {'beta' if is_beta else 'GA'} types")
    check_audio()
    with open(os.path.join(audio_dir, "openai-transcription-stream.sse"), "w") as f:
        f.write(sse(transcription_events()))
    with open(os.path.join(audio_dir, "openai-speech-stream.sse"), "w") as f:
        f.write(sse(speech_events()))
    print("openai-transcription-stream.sse, openai-speech-stream.sse")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: openai_realtime_fixtures.py REALTIME_DIR AUDIO_DIR")
    main(sys.argv[1], sys.argv[2])
