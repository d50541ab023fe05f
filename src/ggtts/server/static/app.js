// The ggtts web page: streams 16-bit PCM from POST /v1/audio/speech (or, for models that time their words,
// /v1/audio/captioned_speech's JSON lines: each chunk's audio and its words), plays it as it arrives (Web Audio),
// lights up each word as it is heard, then puts the whole utterance in the <audio> element as a WAV file to
// replay or download.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "ggtts-api-key";
const START_DELAY_S = 0.05; // scheduling slack before the first chunk plays
let voicesByModel = {};
let timedModels = new Set(); // models whose audio comes with word timestamps
let current = null; // {abort: AbortController, context: AudioContext|null}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.style.display = message ? "block" : "none";
}

function setStatus(message) {
  $("status").textContent = message;
}

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// A readable sentence from an error response (OpenAI-style body, or whatever came back).
async function errorMessage(response) {
  let text = "";
  try {
    text = await response.text();
    const body = JSON.parse(text);
    if (body && body.error && body.error.message) {
      const hint = response.status === 401 ? " Enter the server's API key above." : "";
      return `${body.error.message} (HTTP ${response.status})${hint}`;
    }
  } catch (e) {
    // not JSON: fall through
  }
  return `the server answered HTTP ${response.status} ${response.statusText}${text ? ": " + text.slice(0, 300) : ""}`;
}

async function getJSON(path) {
  const response = await fetch(path, { headers: authHeaders() });
  if (!response.ok) throw new Error(await errorMessage(response));
  return response.json();
}

function fillSelect(select, values, chosen) {
  select.replaceChildren(...values.map((v) => new Option(v, v, false, v === chosen)));
}

async function loadModels() {
  try {
    const [models, voices] = await Promise.all([getJSON("/v1/models"), getJSON("/v1/voices")]);
    voicesByModel = Object.fromEntries(voices.data.map((m) => [m.model, m]));
    timedModels = new Set(models.data.filter((m) => m.timestamps).map((m) => m.id));
    fillSelect($("model"), models.data.map((m) => m.id));
    fillVoices();
    showError("");
  } catch (e) {
    showError(`Could not list the models: ${e.message}`);
  }
}

function fillVoices() {
  const entry = voicesByModel[$("model").value];
  fillSelect($("voice"), entry ? entry.voices : [], entry ? entry.default_voice : null);
}

function wavHeader(sampleRate, dataBytes) {
  const view = new DataView(new ArrayBuffer(44));
  const ascii = (offset, s) => [...s].forEach((c, i) => view.setUint8(offset + i, c.charCodeAt(0)));
  ascii(0, "RIFF"); view.setUint32(4, 36 + dataBytes, true); ascii(8, "WAVEfmt ");
  view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
  view.setUint32(24, sampleRate, true); view.setUint32(28, sampleRate * 2, true);
  view.setUint16(32, 2, true); view.setUint16(34, 16, true);
  ascii(36, "data"); view.setUint32(40, dataBytes, true);
  return view.buffer;
}

function makeAudioContext(sampleRate) {
  try {
    return new AudioContext({ sampleRate });
  } catch (e) {
    return null; // no live playback; the finished file still goes to the player
  }
}

function playPcm(context, samples, sampleRate, startAt) {
  const floats = new Float32Array(samples.length);
  for (let i = 0; i < samples.length; i++) floats[i] = samples[i] / 32768;
  const buffer = context.createBuffer(1, floats.length, sampleRate);
  buffer.copyToChannel(floats, 0);
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  const at = Math.max(startAt, context.currentTime + START_DELAY_S);
  source.start(at);
  return at + buffer.duration;
}

// The raw 16-bit PCM body, as it arrives, in whole samples.
async function readPcm(response, take) {
  const reader = response.body.getReader();
  let carry = null; // an odd byte left over between network chunks
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    let chunk = value;
    if (carry !== null) {
      chunk = new Uint8Array(value.length + 1);
      chunk[0] = carry;
      chunk.set(value, 1);
      carry = null;
    }
    if (chunk.length % 2) {
      carry = chunk[chunk.length - 1];
      chunk = chunk.subarray(0, chunk.length - 1);
    }
    if (chunk.length) take(new Int16Array(chunk.slice().buffer), []);
  }
}

// Captioned speech's JSON lines: {"audio": base64 PCM, "timestamps": [{"word", "start_time", "end_time"}]}
// (times from the start of the utterance), or an error line before the server cuts the stream.
async function readCaptionLines(response, take) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (value) pending += value;
    let newline;
    while ((newline = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      if (!line.trim()) continue;
      const body = JSON.parse(line);
      if (body.error) throw new Error(body.error.message);
      const raw = Uint8Array.from(atob(body.audio), (c) => c.charCodeAt(0));
      if (raw.length) take(new Int16Array(raw.buffer.slice(0, raw.length - (raw.length % 2))), body.timestamps || []);
    }
    if (done) return;
  }
}

function clearCaptions() {
  $("captions").replaceChildren();
}

// A word, greyed until it is heard: lit up when the audio clock reaches ``at`` (seconds, AudioContext time).
function showWordAt(context, at, word) {
  const span = showWord(word, true);
  const light = () => {
    document.querySelectorAll("#captions span.now").forEach((s) => s.classList.remove("now"));
    span.classList.add("said", "now");
  };
  const wait = (at - context.currentTime) * 1000;
  if (wait <= 0) light();
  else setTimeout(light, wait);
}

function showWord(word, pending) {
  const span = document.createElement("span");
  span.textContent = word;
  if (!pending) span.classList.add("said");
  const box = $("captions");
  if (box.childNodes.length) box.append(" ");
  box.append(span);
  return span;
}

async function speak() {
  showError("");
  const text = $("text").value;
  if (!text.trim()) {
    showError("Type some text first.");
    return;
  }
  stop();
  const abort = new AbortController();
  current = { abort, context: null };
  $("speak").disabled = true;
  $("stop").disabled = false;
  $("download").style.display = "none";
  setStatus("Synthesizing…");
  const started = performance.now();
  try {
    const model = $("model").value;
    const captioned = timedModels.has(model);
    const response = await fetch(captioned ? "/v1/audio/captioned_speech" : "/v1/audio/speech", {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify({
        model: model || undefined,
        voice: $("voice").value || undefined,
        input: text,
        speed: parseFloat($("speed").value),
        response_format: "pcm",
        stream: true,
      }),
      signal: abort.signal,
    });
    if (!response.ok) throw new Error(await errorMessage(response));
    const sampleRate = parseInt(response.headers.get("X-Sample-Rate"), 10);
    const context = makeAudioContext(sampleRate);
    current.context = context;
    clearCaptions();
    const parts = [];
    let playAt = 0;
    let bytes = 0;
    let firstAudioMs = null;
    const take = (samples, words) => {
      if (firstAudioMs === null) firstAudioMs = performance.now() - started;
      const chunkStart = bytes / 2 / sampleRate; // where this chunk starts in the utterance, seconds
      parts.push(samples);
      bytes += samples.length * 2;
      if (context) {
        const at = Math.max(playAt, context.currentTime + START_DELAY_S);
        playAt = playPcm(context, samples, sampleRate, at);
        for (const w of words) showWordAt(context, at + (w.start_time - chunkStart), w.word);
      } else {
        for (const w of words) showWord(w.word, false);
      }
      setStatus(`Receiving… ${(bytes / 2 / sampleRate).toFixed(1)} s of audio`);
    };
    if (captioned) await readCaptionLines(response, take);
    else await readPcm(response, take);
    const blob = new Blob([wavHeader(sampleRate, bytes), ...parts], { type: "audio/wav" });
    const url = URL.createObjectURL(blob);
    const player = $("player");
    if (player.src) URL.revokeObjectURL(player.src);
    player.src = url;
    $("download").href = url;
    $("download").style.display = "inline";
    const seconds = bytes / 2 / sampleRate;
    setStatus(`${seconds.toFixed(2)} s of audio at ${sampleRate} Hz; first audio after ${Math.round(firstAudioMs)} ms` +
      (context ? "" : " (this browser could not play it live: use the player)"));
  } catch (e) {
    if (e.name === "AbortError") setStatus("Stopped.");
    else {
      setStatus("");
      showError(e instanceof TypeError ? `The connection failed: ${e.message}` : e.message);
    }
  } finally {
    $("speak").disabled = false;
    $("stop").disabled = !(current && current.context); // Stop also silences audio still playing
  }
}

function stop() {
  if (!current) return;
  current.abort.abort();
  if (current.context) current.context.close();
  current = null;
}

$("speed").addEventListener("input", () => { $("speed-value").value = parseFloat($("speed").value).toFixed(2); });
$("model").addEventListener("change", fillVoices);
$("speak").addEventListener("click", speak);
$("stop").addEventListener("click", stop);
$("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
$("api-key").addEventListener("change", () => { localStorage.setItem(KEY_STORAGE, $("api-key").value.trim()); loadModels(); });
loadModels();
