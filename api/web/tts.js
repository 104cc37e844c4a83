// The page at "/": a thin client of the public API (no build step, no framework).
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "tts-queue-key";
const EXTENSIONS = { wav: "wav", flac: "flac", ogg: "ogg", mp3: "mp3", opus: "opus", aac: "aac", pcm: "pcm" };

function headers(extra) {
  const key = $("api-key").value.trim();
  const all = Object.assign({}, extra || {});
  if (key) {
    all.Authorization = "Bearer " + key;
  }
  return all;
}

async function api(url, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = headers(opts.headers);
  const response = await fetch(url, opts);
  const type = response.headers.get("Content-Type") || "";
  const body = type.includes("json") ? await response.json() : null;
  if (!response.ok) {
    const error = (body && body.error) || {};
    throw new Error((error.message || response.statusText) + (error.code ? " (" + error.code + ")" : ""));
  }
  return body;
}

async function audioBlobUrl(url) {
  // fetched with the key (an <audio src> cannot send headers), then played from memory
  const response = await fetch(url, { headers: headers() });
  if (!response.ok) {
    throw new Error("the audio could not be fetched: " + response.status);
  }
  return URL.createObjectURL(await response.blob());
}

function say(element, text, isError) {
  element.textContent = text;
  element.classList.toggle("error", Boolean(isError));
}

async function waitForTask(task, status) {
  while (task.status === "queued" || task.status === "running") {
    say(status, "Task " + task.task_id.slice(0, 8) + ": " + task.status + "…");
    task = await api(task.status_url + "?wait=10");
  }
  return task;
}

let playing = null;

async function showAudio(task) {
  if (playing) {
    URL.revokeObjectURL(playing);
  }
  playing = await audioBlobUrl(task.audio_url);
  const player = $("player");
  player.src = playing;
  $("download").href = playing;
  $("download").download = "speech-" + task.task_id.slice(0, 8) + "." + (EXTENSIONS[task.format] || "bin");
  const t = task.timings;
  $("timings").textContent = t
    ? "queue " + t.queue_ms + " ms, text " + t.text_ms + " ms, model " + t.inference_ms + " ms, encode " +
      t.encode_ms + " ms, store " + t.store_ms + " ms, total " + t.total_ms + " ms"
    : (task.cache_hit ? "from the cache" : "");
  $("result").hidden = false;
}

async function speak(event) {
  event.preventDefault();
  const status = $("speak-status");
  const button = $("speak");
  button.disabled = true;
  try {
    const body = {
      text: $("text").value,
      voice: $("voice").value || undefined, // "": chosen by the text's language
      speed: parseFloat($("speed").value || "1"),
      format: $("format").value,
    };
    let task = await api("/v1/tts", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    task = await waitForTask(task, status);
    if (task.status !== "done") {
      const why = task.error ? task.error.message + " (" + task.error.code + ")" : task.status;
      say(status, "Task " + task.task_id.slice(0, 8) + " " + task.status + ": " + why, true);
      return;
    }
    await showAudio(task);
    say(status, "Done: " + (task.duration_s || 0).toFixed(2) + " s of audio" + (task.cache_hit ? " (cached)" : "") + ".");
    loadRecent();
  } catch (error) {
    say(status, error.message, true);
  } finally {
    button.disabled = false;
  }
}

function chapterItem(chapter) {
  const item = document.createElement("li");
  const label = document.createElement("span");
  label.textContent = chapter.title + " — " + chapter.status + " (" + chapter.sentences_done + "/" +
    chapter.sentences_total + ")";
  item.appendChild(label);
  if (chapter.audio_url) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "Play chapter " + chapter.number;
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const audio = document.createElement("audio");
        audio.controls = true;
        audio.src = await audioBlobUrl(chapter.audio_url);
        item.appendChild(audio);
        audio.play().catch(() => {});
      } catch (error) {
        label.textContent += " — " + error.message;
        button.disabled = false;
      }
    });
    item.appendChild(button);
  }
  return item;
}

function showBook(book) {
  const progress = $("book-progress");
  progress.hidden = false;
  progress.max = Math.max(1, book.sentences_total);
  progress.value = book.sentences_done;
  const eta = book.eta_s ? ", about " + Math.ceil(book.eta_s / 60) + " min left" : "";
  say($("book-status"), (book.title || "Book") + ": " + book.status + ", " + book.sentences_done + " of " +
    book.sentences_total + " sentences" + eta, book.status === "failed");
  const list = $("chapters");
  list.replaceChildren(...book.chapters.map(chapterItem));
}

async function watchBook(url) {
  for (;;) {
    const book = await api(url);
    showBook(book);
    if (["done", "failed", "cancelled"].includes(book.status)) {
      loadRecent();
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

async function upload(event) {
  event.preventDefault();
  const status = $("book-status");
  const button = $("upload");
  button.disabled = true;
  try {
    const form = new FormData();
    form.append("file", $("book-file").files[0]);
    form.append("format", $("book-format").value);
    const accepted = await api("/v1/books", { method: "POST", body: form });
    say(status, "Accepted; reading the book…");
    await watchBook(accepted.status_url);
  } catch (error) {
    say(status, error.message, true);
  } finally {
    button.disabled = false;
  }
}

async function loadRecent() {
  try {
    const [tasks, books] = await Promise.all([api("/v1/tasks?limit=10"), api("/v1/books?limit=10")]);
    $("recent-tasks").replaceChildren(...tasks.tasks.map((task) => {
      const item = document.createElement("li");
      const text = task.task_id.slice(0, 8) + " " + task.status + " " + task.voice + " " + task.format;
      if (task.status === "done") {
        const button = document.createElement("button");
        button.type = "button";
        button.textContent = "Play " + text;
        button.addEventListener("click", () => showAudio(task).catch((e) => say($("speak-status"), e.message, true)));
        item.appendChild(button);
      } else {
        item.textContent = text;
      }
      return item;
    }));
    $("recent-books").replaceChildren(...books.books.map((book) => {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = (book.title || book.book_id.slice(0, 8)) + " — " + book.status;
      button.addEventListener("click", () => watchBook(book.status_url).catch((e) => say($("book-status"), e.message, true)));
      item.appendChild(button);
      return item;
    }));
  } catch (error) {
    $("recent-tasks").replaceChildren();
    const item = document.createElement("li");
    item.textContent = error.message;
    $("recent-tasks").appendChild(item);
  }
}

$("api-key").value = sessionStorage.getItem(KEY_STORE) || "";
$("api-key").addEventListener("change", () => {
  sessionStorage.setItem(KEY_STORE, $("api-key").value.trim());
  loadRecent();
});
$("speak-form").addEventListener("submit", speak);
$("book-form").addEventListener("submit", upload);
$("refresh").addEventListener("click", loadRecent);
loadRecent();
