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

// --- the reader view: a chapter's text highlighted as its audio plays --------------------------

function vttCues(text) {
  // The cues of a WebVTT file as the service writes it: a timing line, then one text line.
  const seconds = (stamp) => {
    const [h, m, s] = stamp.trim().split(":");
    return Number(h) * 3600 + Number(m) * 60 + Number(s);
  };
  const lines = text.split("\n");
  const cues = [];
  lines.forEach((line, n) => {
    if (line.includes("-->")) {
      const [start, end] = line.split("-->");
      const area = document.createElement("textarea");
      area.innerHTML = lines[n + 1] || ""; // &amp; &lt; &gt; back to text
      cues.push({ start: seconds(start), end: seconds(end), text: area.value });
    }
  });
  return cues;
}

function readerSentences(sentences, cues) {
  // Each sentence with the cues that start in its tile (its start to the next one's), as the
  // EPUB's overlays group them: several cues found in its text in order are its words.
  const groups = [];
  let at = 0;
  sentences.forEach((sentence, index) => {
    const lower = index === 0 ? 0 : Math.round(sentence.start_s * 1000);
    const next = sentences[index + 1];
    const upper = next ? Math.round(next.start_s * 1000) : Infinity;
    const own = [];
    while (at < cues.length && Math.round(cues[at].start * 1000) < upper) {
      if (Math.round(cues[at].start * 1000) >= lower) {
        own.push(cues[at]);
      }
      at += 1;
    }
    if (own.length === 0) {
      return;
    }
    const text = sentence.text.split(/\s+/).filter(Boolean).join(" ");
    let words = [];
    if (own.length > 1) {
      let from = 0;
      for (const cue of own) {
        const word = cue.text.split(/\s+/).filter(Boolean).join(" ");
        const found = word ? text.indexOf(word, from) : -1;
        if (found < 0) {
          words = [];
          break;
        }
        words.push({ from: found, to: found + word.length, start: cue.start, end: cue.end });
        from = found + word.length;
      }
    }
    groups.push({ index, text, start: own[0].start, end: own[own.length - 1].end, words });
  });
  return groups;
}

const reader = { clips: [], sentence: null, word: null };

function readerHighlight() {
  const time = $("reader-audio").currentTime;
  // the last clip that starts at or before the playhead (clips are in order and tile the audio)
  let low = 0;
  let high = reader.clips.length - 1;
  let found = -1;
  while (low <= high) {
    const mid = (low + high) >> 1;
    if (reader.clips[mid].start <= time) {
      found = mid;
      low = mid + 1;
    } else {
      high = mid - 1;
    }
  }
  const clip = found >= 0 ? reader.clips[found] : null;
  const sentence = clip ? clip.sentence : null;
  const word = clip ? clip.word : null;
  if (word !== reader.word) {
    if (reader.word) reader.word.classList.remove("active");
    if (word) word.classList.add("active");
    reader.word = word;
  }
  if (sentence !== reader.sentence) {
    if (reader.sentence) reader.sentence.classList.remove("active");
    if (sentence) {
      sentence.classList.add("active");
      sentence.scrollIntoView({ block: "center", behavior: "smooth" });
    }
    reader.sentence = sentence;
  }
}

function readerFollow() {
  readerHighlight();
  if (!$("reader-audio").paused) {
    requestAnimationFrame(readerFollow);
  }
}

async function openReader(book, chapter) {
  const manifest = await api("/v1/books/" + book.book_id + "/manifest");
  const entry = manifest.chapters.find((c) => c.number === chapter.number);
  const response = await fetch(chapter.vtt_url, { headers: headers() });
  if (!entry || !entry.sentences || !response.ok) {
    throw new Error("the chapter's text or captions could not be read");
  }
  const groups = readerSentences(entry.sentences, vttCues(await response.text()));
  const text = $("reader-text");
  const paragraph = document.createElement("p");
  reader.clips = [];
  for (const group of groups) {
    const span = document.createElement("span");
    span.className = "sentence";
    span.id = "reader-s" + (group.index + 1);
    span.dataset.start = String(group.start);
    let at = 0;
    group.words.forEach((word, n) => {
      span.append(group.text.slice(at, word.from));
      const inner = document.createElement("span");
      inner.className = "word";
      inner.id = span.id + "w" + (n + 1);
      inner.textContent = group.text.slice(word.from, word.to);
      span.append(inner);
      reader.clips.push({ start: word.start, end: word.end, sentence: span, word: inner });
      at = word.to;
    });
    span.append(group.text.slice(at));
    if (group.words.length === 0) {
      reader.clips.push({ start: group.start, end: group.end, sentence: span, word: null });
    }
    span.addEventListener("click", () => {
      const audio = $("reader-audio");
      audio.currentTime = group.start;
      audio.play().catch(() => {});
    });
    paragraph.append(span, " ");
  }
  text.replaceChildren(paragraph);
  reader.sentence = null;
  reader.word = null;
  $("reader-heading").textContent = "Read along: " + chapter.title;
  const audio = $("reader-audio");
  audio.src = await audioBlobUrl(chapter.audio_url);
  $("reader").hidden = false;
  $("reader").scrollIntoView();
}

function chapterItem(chapter, book) {
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
    const read = document.createElement("button");
    read.type = "button";
    read.textContent = "Read along chapter " + chapter.number;
    read.addEventListener("click", () => openReader(book, chapter).catch((e) => say($("book-status"), e.message, true)));
    item.appendChild(read);
  }
  return item;
}

async function downloadEpub(book) {
  // 202 while the service builds it (asked again after Retry-After), then the file
  const status = $("epub-status");
  for (;;) {
    const response = await fetch(book.epub_url, { headers: headers() });
    if (response.status === 202) {
      say(status, "building the EPUB…");
      await new Promise((resolve) => setTimeout(resolve, 1000 * Number(response.headers.get("Retry-After") || 2)));
      continue;
    }
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      say(status, ((body.error && body.error.message) || response.statusText), true);
      return;
    }
    const link = document.createElement("a");
    link.href = URL.createObjectURL(await response.blob());
    link.download = (book.title || "book") + ".epub";
    link.click();
    say(status, "EPUB downloaded.");
    return;
  }
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
  list.replaceChildren(...book.chapters.map((chapter) => chapterItem(chapter, book)));
  $("epub-link").hidden = !book.epub_url;
  $("epub-download").onclick = (event) => {
    event.preventDefault();
    downloadEpub(book).catch((e) => say($("epub-status"), e.message, true));
  };
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
$("reader-audio").addEventListener("play", readerFollow);
$("reader-audio").addEventListener("timeupdate", readerHighlight);
$("reader-audio").addEventListener("seeked", readerHighlight);
loadRecent();
