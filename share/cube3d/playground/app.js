// The playground's page logic: the request form, generateStream's progress (fetch + a
// ReadableStream, parsed as Server-Sent Events here: EventSource cannot POST), the result, the
// downloads, the history of this tab and the shareable link. Plain ES2017, no dependencies but
// the viewer (viewer.js, over three.js).
//
// The browser test (tests/e2e/test_browser_e2e.py) reads document.body.dataset.state
// (idle | running | done | error | cancelled) and window.cube3dPlayground (see `playground`).
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);

  const KEY_STORAGE = 'cube3d.apiKey';  // sessionStorage only: the key dies with the tab
  const HISTORY_MAX = 20;
  const THUMB_SIZE = [128, 96];
  const MODEL_RETRY_MS = 400;  // the pause after typing a key before /v1/model is asked again
  const MODEL_LOADING_RETRY_MS = 2000;  // how often /v1/model is asked while the model loads
  const FORMATS = {
    glb: {name: 'MESH_FORMAT_GLB', mime: 'model/gltf-binary', label: 'GLB'},
    obj: {name: 'MESH_FORMAT_OBJ', mime: 'model/obj', label: 'OBJ'},
    ply: {name: 'MESH_FORMAT_PLY', mime: 'application/x-ply', label: 'PLY'},
  };
  const PROFILES = {none: 'MESH_PROFILE_NONE', roblox: 'MESH_PROFILE_ROBLOX'};
  // The stages in the order a request goes through them, with the share of the progress bar
  // each one starts at (decoding and meshing fill theirs as their counts grow).
  const STAGE_START = {
    STAGE_QUEUED: 0, STAGE_TEXT_ENCODING: 0.03, STAGE_DECODING: 0.08, STAGE_MESHING: 0.6,
    STAGE_DONE: 0.97,
  };
  const STAGE_ORDER = Object.keys(STAGE_START);
  // The fields that make a mesh what it is, as `effective` in a result names them: the same
  // values (and another format) give the same mesh, with the server's provenance in the file.
  const EFFECTIVE_FIELDS = ['seed', 'guidanceScale', 'topP', 'resolutionBase', 'meshProfile',
                            'targetFaceCount', 'boundingBox'];

  // The machine-readable state (for the browser test and for anyone at the console):
  //   ready       the page has set itself up (listeners, viewer, the link's form values)
  //   state       as document.body.dataset.state
  //   stages      every stage seen in the current generation, in order, each once
  //   progress    every progress event of the current generation (the server's JSON)
  //   lastProgress  the newest of them
  //   result      the shown result: the server's JSON without `encoded` (encodedBytes instead)
  //   shown       what the viewer shows: {format, faces, vertices} counted from the geometry
  //   error       the message in #error, or null
  //   model       GET /v1/model's answer, or null when not (yet) known
  //   background  the viewer's clear colour (#rrggbb)
  //   generations how many generations this page started (a test waits for the next one)
  //   current     the id (data-id in #history) of the history entry on show, or null
  const playground = {
    ready: false, state: 'idle', stages: [], progress: [], lastProgress: null, result: null,
    shown: null, error: null, model: null, background: null, generations: 0, current: null,
  };
  window.cube3dPlayground = playground;

  let viewer = null;
  let viewerProblem = null;  // why there is no viewer, when there is none
  let controller = null;     // the running generation's AbortController
  let current = null;        // the history entry on show
  let nextId = 1;
  let modelTimer = 0;
  let modelSerial = 0;
  let selectsChosen = false;  // format / mesh profile set by a link or the user: keep them
  const entries = [];  // this tab's history, newest first

  // --- small helpers ---------------------------------------------------------------------------

  class PlaygroundError extends Error {}

  const count = (n) => (n === undefined || n === null ? '–' : Number(n).toLocaleString('en-US'));
  const ms = (v) => (typeof v === 'number' ? `${v < 10 ? v.toFixed(1) : Math.round(v)} ms` : '–');
  const formatKey = (name) => (Object.keys(FORMATS).find((k) => FORMATS[k].name === name) ||
                               String(name || '').replace('MESH_FORMAT_', '').toLowerCase());
  const profileKey = (name) => (Object.keys(PROFILES).find((k) => PROFILES[k] === name) ||
                                'none');
  const words = (name) => String(name || '').replace(/^[A-Z]+_STATUS_/, '').toLowerCase()
                                            .replace(/_/g, ' ');

  function apiKey() {
    return $('api-key').value.trim();
  }

  function headers(extra) {
    const out = {'Content-Type': 'application/json', ...extra};
    const key = apiKey();
    if (key) out.Authorization = `Bearer ${key}`;
    return out;
  }

  function setState(state) {
    playground.state = state;
    document.body.dataset.state = state;
    const running = state === 'running';
    $('generate').disabled = running;
    $('cancel').disabled = !running;
    for (const button of $('history').querySelectorAll('button')) button.disabled = running;
  }

  function setStatus(text) {
    $('status').textContent = text;
  }

  function showError(message) {
    playground.error = message;
    $('error').textContent = message;
    $('error').hidden = false;
  }

  function clearError() {
    playground.error = null;
    $('error').textContent = '';
    $('error').hidden = true;
  }

  // fetch, with a network failure (no answer at all) said in words.
  async function request(url, options) {
    try {
      return await fetch(url, {cache: 'no-store', ...options});
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new PlaygroundError(`network error: the server did not answer (${e.message})`);
    }
  }

  // An error answer as "<code> <STATUS>: <message>", with the retry time of a 429/503.
  async function httpError(response) {
    let status = response.statusText;
    let message = '';
    const text = await response.text().catch(() => '');
    try {
      const body = JSON.parse(text).error;
      status = body.status || status;
      message = body.message || '';
    } catch (e) {
      message = text.trim().slice(0, 300);
    }
    let said = `${response.status} ${status}: ${message || 'no message'}`;
    const retry = response.headers.get('Retry-After');
    if (retry !== null && retry.trim() !== '') said += ` (retry in ${retry.trim()} s)`;
    return new PlaygroundError(said);
  }

  function base64Bytes(text) {
    const binary = atob(text || '');
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  // A file name from the prompt: "A wooden chair!" -> "a-wooden-chair".
  function slug(prompt) {
    const s = prompt.toLowerCase().normalize('NFKD').replace(/[^a-z0-9]+/g, '-')
                    .replace(/^-+|-+$/g, '').slice(0, 60).replace(/-+$/, '');
    return s || 'mesh';
  }

  // --- the form --------------------------------------------------------------------------------

  const TEXT_FIELDS = {
    prompt: 'prompt', resolutionBase: 'resolution-base', seed: 'seed', topP: 'top-p',
    guidanceScale: 'guidance-scale', targetFaceCount: 'target-face-count', bboxX: 'bbox-x',
    bboxY: 'bbox-y', bboxZ: 'bbox-z', format: 'format', meshProfile: 'mesh-profile',
  };

  // The form as typed (strings), to refill it from the history.
  function formValues() {
    const out = {};
    for (const [name, id] of Object.entries(TEXT_FIELDS)) out[name] = $(id).value;
    return out;
  }

  function fillForm(values) {
    for (const [name, id] of Object.entries(TEXT_FIELDS)) {
      if (values[name] !== undefined) $(id).value = values[name];
    }
  }

  function boundingBoxShown() {
    return !$('bbox').hidden;
  }

  // The request body: protobuf JSON, fields left empty left out (the server's defaults apply).
  // Values go as typed; the server checks them and names the field it refuses.
  function requestBody(values) {
    const body = {prompt: values.prompt};
    const number = (text) => (text.trim() === '' ? undefined : Number(text));
    const put = (key, value) => {
      if (value !== undefined) body[key] = value;
    };
    put('resolutionBase', number(values.resolutionBase));
    if (values.seed.trim() !== '') body.seed = values.seed.trim();  // uint64: a JSON string
    put('topP', number(values.topP));
    put('guidanceScale', number(values.guidanceScale));
    put('targetFaceCount', number(values.targetFaceCount));
    if (boundingBoxShown() && [values.bboxX, values.bboxY, values.bboxZ].some((v) => v !== '')) {
      body.boundingBox = {x: number(values.bboxX) ?? 1, y: number(values.bboxY) ?? 1,
                          z: number(values.bboxZ) ?? 1};
    }
    // The view needs a mesh file, whatever the server's default format: always said.
    body.format = FORMATS[values.format].name;
    body.meshProfile = PROFILES[values.meshProfile] || PROFILES.none;
    return body;
  }

  // The shareable link's parameters into the form; true when it names a prompt (start at once).
  function fillFromLink() {
    const query = new URLSearchParams(location.search);
    if (!query.has('prompt')) return false;
    const values = {prompt: query.get('prompt')};
    for (const name of ['resolutionBase', 'seed', 'topP', 'guidanceScale', 'targetFaceCount']) {
      if (query.has(name)) values[name] = query.get(name);
    }
    if (query.has('format')) {
      // glb | obj | ply, or the API's names (MESH_FORMAT_GLB, ...)
      const format = query.get('format').toLowerCase().replace(/^mesh_format_/, '');
      if (!FORMATS[format]) {
        showError(`the link's format "${query.get('format')}" is not one of glb, obj, ply`);
        fillForm(values);
        return false;
      }
      values.format = format;
    }
    if (query.has('meshProfile')) {
      const profile = query.get('meshProfile').toLowerCase().replace(/^mesh_profile_/, '');
      if (!PROFILES[profile]) {
        showError(`the link's meshProfile "${query.get('meshProfile')}" is not none or roblox`);
        fillForm(values);
        return false;
      }
      values.meshProfile = profile;
    }
    if (query.has('bbox')) {
      const [x = '', y = '', z = ''] = query.get('bbox').split(',');
      Object.assign(values, {bboxX: x, bboxY: y, bboxZ: z});
    }
    fillForm(values);
    return true;
  }

  // The link that makes the entry's mesh again: its effective parameters.
  function shareLink(entry) {
    const effective = entry.result.effective || {};
    const query = new URLSearchParams();
    query.set('prompt', entry.prompt);
    for (const name of ['resolutionBase', 'seed', 'topP', 'guidanceScale', 'targetFaceCount']) {
      if (effective[name] !== undefined && effective[name] !== null) {
        query.set(name, String(effective[name]));
      }
    }
    query.set('format', formatKey(effective.format || entry.result.format));
    query.set('meshProfile', profileKey(effective.meshProfile));
    const box = effective.boundingBox;
    if (box) query.set('bbox', [box.x ?? 1, box.y ?? 1, box.z ?? 1].join(','));
    return `/?${query}`;
  }

  // --- the model -------------------------------------------------------------------------------

  // GET /v1/model: the model's name, its defaults (the placeholders), its limits (the inputs'
  // ranges) and whether it takes a bounding box (v0.5 models). Asked at start and after the key
  // changes; a keyed server answers 401 without a valid key.
  async function loadModel() {
    const serial = ++modelSerial;
    const info = $('model-info');
    let response;
    try {
      const key = apiKey();
      response = await request('/v1/model', {headers: key ? {Authorization: `Bearer ${key}`}
                                                          : {}});
    } catch (e) {
      if (serial === modelSerial) info.textContent = 'the server did not answer';
      return;
    }
    if (serial !== modelSerial) return;  // a newer key's answer counts
    if (response.status === 401 || response.status === 403) {
      playground.model = null;
      info.textContent = apiKey() ? 'this API key is not accepted here'
                                  : 'this server needs an API key';
      return;
    }
    if (response.status === 503 && serial === modelSerial) {
      // Still loading (or draining): ask again shortly, the page works meanwhile.
      info.textContent = 'the server is loading the model…';
      clearTimeout(modelTimer);
      modelTimer = setTimeout(loadModel, MODEL_LOADING_RETRY_MS);
      return;
    }
    if (!response.ok) {
      info.textContent = `model information unavailable (${response.status})`;
      return;
    }
    applyModel(await response.json());
  }

  function applyModel(model) {
    playground.model = model;
    const defaults = model.defaults || {};
    const limits = model.limits || {};
    $('model-info').textContent = [`model ${model.model}`, `${model.tokensPerShape} tokens`,
                                   model.serverVersion && `server ${model.serverVersion}`]
                                  .filter(Boolean).join(' · ');
    const resolution = $('resolution-base');
    if (limits.minResolutionBase) resolution.min = limits.minResolutionBase;
    if (limits.maxResolutionBase) resolution.max = limits.maxResolutionBase;
    if (defaults.resolutionBase) resolution.placeholder = defaults.resolutionBase;
    if (limits.maxGuidanceScale) $('guidance-scale').max = limits.maxGuidanceScale;
    if (defaults.guidanceScale !== undefined) {
      $('guidance-scale').placeholder = defaults.guidanceScale;
    }
    $('top-p').placeholder = defaults.topP !== undefined ? defaults.topP : 'greedy';
    if (limits.maxTargetFaceCount) $('target-face-count').max = limits.maxTargetFaceCount;
    if (limits.maxPromptBytes) $('prompt').maxLength = limits.maxPromptBytes;
    $('bbox').hidden = !model.boundingBox;
    // The server's defaults for the selects, unless a link or the user chose already.
    if (!selectsChosen) {
      const format = formatKey(defaults.format);
      if (FORMATS[format]) $('format').value = format;
      if (defaults.meshProfile) $('mesh-profile').value = profileKey(defaults.meshProfile);
    }
  }

  // --- generating ------------------------------------------------------------------------------

  // Reads a text/event-stream body, calling onEvent(event, data) per event; ':' lines are the
  // server's keep-alive comments.
  async function readEvents(body, onEvent) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    let event = '';
    let data = [];
    const line = (text) => {
      if (text === '') {
        if (data.length) onEvent(event || 'message', data.join('\n'));
        event = '';
        data = [];
        return;
      }
      if (text.startsWith(':')) return;
      const colon = text.indexOf(':');
      const field = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? '' : text.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    };
    try {
      for (;;) {
        const {value, done} = await reader.read().catch((e) => {
          if (e.name === 'AbortError') throw e;  // cancelled
          throw new PlaygroundError(`network error: the stream broke (${e.message})`);
        });
        if (done) break;
        buffer += decoder.decode(value, {stream: true});
        const lines = buffer.split(/\r?\n/);
        buffer = lines.pop();
        lines.forEach(line);
      }
    } catch (e) {
      reader.cancel().catch(() => {});  // an error event or a broken line: let the stream go
      throw e;
    }
    buffer += decoder.decode();
    if (buffer !== '') line(buffer);
    line('');
  }

  function stageText(p) {
    switch (p.stage) {
      case 'STAGE_QUEUED': return 'queued…';
      case 'STAGE_TEXT_ENCODING': return 'encoding the prompt…';
      case 'STAGE_DECODING':
        return `decoding shape tokens: ${p.tokensDone || 0} / ${p.tokensTotal || '?'}`;
      case 'STAGE_MESHING':
        if (!p.levelsTotal) return 'meshing…';
        return `meshing: level ${p.levelsDone || 0} / ${p.levelsTotal}, ` +
               `${count(p.pointsDone || 0)} / ${count(p.pointsPlanned || 0)} occupancy points`;
      case 'STAGE_DONE': return 'writing the mesh…';
      default: return words(p.stage);
    }
  }

  function stageFraction(p) {
    const start = STAGE_START[p.stage] ?? 0;
    const next = STAGE_START[STAGE_ORDER[STAGE_ORDER.indexOf(p.stage) + 1]] ?? 1;
    let within = 0;
    if (p.stage === 'STAGE_DECODING' && p.tokensTotal) within = p.tokensDone / p.tokensTotal;
    if (p.stage === 'STAGE_MESHING' && p.levelsTotal) within = p.levelsDone / p.levelsTotal;
    return start + (next - start) * Math.min(1, Math.max(0, within));
  }

  function showStages(stage) {
    const at = STAGE_ORDER.indexOf(stage);
    for (const item of $('stages').children) {
      const index = STAGE_ORDER.indexOf(item.dataset.stage);
      item.classList.toggle('done', at > index || stage === 'STAGE_DONE');
      item.classList.toggle('active', at === index && stage !== 'STAGE_DONE');
    }
  }

  function onProgress(p, started) {
    playground.progress.push(p);
    playground.lastProgress = p;
    const stages = playground.stages;
    if (stages[stages.length - 1] !== p.stage) stages.push(p.stage);
    $('progress').value = stageFraction(p);
    showStages(p.stage);
    setStatus(`${stageText(p)} · ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }

  async function generate() {
    if (controller) return;
    const values = formValues();
    if (values.prompt.trim() === '') {
      showError('type a prompt first');
      $('prompt').focus();
      return;
    }
    clearError();
    playground.stages = [];
    playground.progress = [];
    playground.lastProgress = null;
    $('progress').value = 0;
    showStages('');
    const body = requestBody(values);
    controller = new AbortController();
    playground.generations += 1;
    setState('running');
    setStatus('sending…');
    const started = performance.now();
    let result = null;
    try {
      const response = await request('/v1/meshes:generateStream', {
        method: 'POST', headers: headers({Accept: 'text/event-stream'}),
        body: JSON.stringify(body), signal: controller.signal,
      });
      if (!response.ok) throw await httpError(response);
      await readEvents(response.body, (event, data) => {
        if (event === 'progress') {
          onProgress(JSON.parse(data), started);
        } else if (event === 'result') {
          result = JSON.parse(data);
        } else if (event === 'error') {
          let e = {};
          try {
            e = JSON.parse(data).error || {};
          } catch (ignored) {
            e = {message: data};
          }
          throw new PlaygroundError(`${e.code || ''} ${e.status || 'ERROR'}: ${e.message || ''}`
                                    .trim());
        }
      });
      if (!result) throw new PlaygroundError('the stream ended without a result');
      controller = null;
      await showResult(result, values, started);
    } catch (e) {
      controller = null;
      if (e.name === 'AbortError') {
        $('progress').value = 0;
        setStatus('cancelled');
        setState('cancelled');
        return;
      }
      showError(e instanceof PlaygroundError ? e.message : `unexpected: ${e.message || e}`);
      setStatus('failed');
      setState('error');
    }
  }

  function cancel() {
    if (controller) controller.abort();  // closes the connection: the server stops the work
  }

  async function showResult(result, values, started) {
    const bytes = base64Bytes(result.encoded);
    const summary = {...result, encodedBytes: bytes.length};
    delete summary.encoded;
    const format = formatKey(result.format);
    const entry = {id: nextId++, prompt: values.prompt, values, result: summary, format,
                   files: {[format]: bytes}, thumb: null};
    playground.result = summary;
    showDetails(entry);
    $('progress').value = 1;
    showStages('STAGE_DONE');
    const elapsed = ((performance.now() - started) / 1000).toFixed(1);
    await showMesh(entry);  // throws when the view cannot show it
    entry.thumb = viewer.thumbnail(...THUMB_SIZE);
    entries.unshift(entry);
    entries.length = Math.min(entries.length, HISTORY_MAX);
    setCurrent(entry);
    setStatus(`done in ${elapsed} s`);
    setState('done');
  }

  async function showMesh(entry) {
    if (!viewer) throw new PlaygroundError(`the mesh cannot be shown: ${viewerProblem}`);
    try {
      const shown = await viewer.show(entry.format, entry.files[entry.format]);
      playground.shown = {format: entry.format, ...shown};
    } catch (e) {
      playground.shown = null;
      throw new PlaygroundError(`the mesh cannot be shown: ${e.message || e}`);
    }
  }

  function showDetails(entry) {
    const r = entry.result;
    $('faces').textContent = count(r.faceCount);
    $('vertices').textContent = count(r.vertexCount);
    const t = r.timings || {};
    const rows = [['queue', ms(t.queueMs)], ['text', ms(t.textEncodingMs)],
                  ['prefill', ms(t.prefillMs)],
                  ['decode', `${ms(t.decodeMs)}${t.tpotMs ? ` (${t.tpotMs.toFixed(2)} ms/token)`
                                                           : ''}`],
                  ['mesh', `${ms(t.meshMs)}${t.occupancyMs ? ` (occupancy ${ms(t.occupancyMs)})`
                                                             : ''}`],
                  ['total', ms(t.totalMs)]];
    $('timings').replaceChildren(...rows.flatMap(([name, value]) => {
      const dt = document.createElement('dt');
      dt.textContent = name;
      const dd = document.createElement('dd');
      dd.textContent = value;
      return [dt, dd];
    }));
    $('cache-status').textContent = words(r.cacheStatus) || '–';
    const effective = r.effective || {};
    $('request-id').textContent = r.requestId || '–';
    $('request-id').title = effective.computedByRequestId &&
                            effective.computedByRequestId !== r.requestId
      ? `computed by ${effective.computedByRequestId}` : '';
    const warnings = r.warnings || [];
    $('warnings').replaceChildren(...warnings.map((w) => {
      const li = document.createElement('li');
      li.textContent = w;
      return li;
    }));
    $('warnings').hidden = warnings.length === 0;
  }

  function setCurrent(entry) {
    current = entry;
    playground.current = entry.id;
    const link = shareLink(entry);
    window.history.replaceState(null, '', link);
    const anchor = $('share-link');
    anchor.href = link;
    anchor.textContent = new URL(link, location.href).href;
    anchor.hidden = false;
    for (const key of Object.keys(FORMATS)) $(`download-${key}`).disabled = false;
    $('copy-link').disabled = false;
    $('download-status').textContent = '';
    renderHistory();
  }

  // --- history ---------------------------------------------------------------------------------

  function renderHistory() {
    const running = controller !== null;
    $('history').replaceChildren(...entries.map((entry) => {
      const li = document.createElement('li');
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'history-item';
      button.dataset.id = String(entry.id);
      button.disabled = running;
      if (entry === current) button.setAttribute('aria-current', 'true');
      const effective = entry.result.effective || {};
      button.setAttribute('aria-label', `Show “${entry.prompt}” again`);
      button.title = entry.prompt;
      const img = document.createElement('img');
      img.src = entry.thumb;
      img.alt = '';
      img.width = THUMB_SIZE[0];
      img.height = THUMB_SIZE[1];
      const prompt = document.createElement('span');
      prompt.className = 'history-prompt';
      prompt.textContent = entry.prompt;
      const meta = document.createElement('span');
      meta.className = 'history-meta';
      meta.textContent = [entry.format.toUpperCase(), `res ${effective.resolutionBase ?? '?'}`,
                          `seed ${effective.seed ?? '?'}`].join(' · ');
      button.append(img, prompt, meta);
      li.append(button);
      return li;
    }));
  }

  async function showEntry(id) {
    const entry = entries.find((e) => e.id === id);
    if (!entry || controller) return;
    clearError();
    fillForm(entry.values);
    playground.result = entry.result;
    showDetails(entry);
    try {
      await showMesh(entry);
    } catch (e) {
      showError(e.message);
      setState('error');
      return;
    }
    setCurrent(entry);
    setStatus(`showing “${entry.prompt}” again`);
    setState('done');
  }

  // --- downloads and the link ------------------------------------------------------------------

  function save(bytes, format, prompt) {
    const url = URL.createObjectURL(new Blob([bytes], {type: FORMATS[format].mime}));
    const a = document.createElement('a');
    a.href = url;
    a.download = `${slug(prompt)}.${format}`;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  // The generated format is the server's own bytes; another is asked of /v1/meshes:generate
  // with the same effective parameters, so that its file carries the server's provenance too.
  async function download(format) {
    const entry = current;
    if (!entry) return;
    if (!entry.files[format]) {
      const button = $(`download-${format}`);
      button.disabled = true;
      $('download-status').textContent = `preparing ${FORMATS[format].label}…`;
      try {
        const effective = entry.result.effective || {};
        const body = {prompt: entry.prompt, format: FORMATS[format].name};
        for (const name of EFFECTIVE_FIELDS) {
          if (effective[name] !== undefined) body[name] = effective[name];
        }
        const response = await request('/v1/meshes:generate', {
          method: 'POST', headers: headers({Accept: FORMATS[format].mime}),
          body: JSON.stringify(body),
        });
        if (!response.ok) throw await httpError(response);
        entry.files[format] = new Uint8Array(await response.arrayBuffer());
        $('download-status').textContent = '';
      } catch (e) {
        $('download-status').textContent = '';
        showError(`${FORMATS[format].label} download: ${e.message}`);
        return;
      } finally {
        button.disabled = false;
      }
    }
    save(entry.files[format], format, entry.prompt);
  }

  async function copyLink() {
    const url = $('share-link').href;
    try {
      await navigator.clipboard.writeText(url);
    } catch (e) {
      // No clipboard permission (an unfocused or embedded page): the classic selection copy.
      const area = document.createElement('textarea');
      area.value = url;
      document.body.append(area);
      area.select();
      const copied = document.execCommand('copy');
      area.remove();
      if (!copied) {
        $('download-status').textContent = 'copy failed: the link is below';
        return;
      }
    }
    $('download-status').textContent = 'link copied';
  }

  // --- start -----------------------------------------------------------------------------------

  function init() {
    try {
      if (typeof window.Cube3dViewer !== 'function') throw new Error('viewer.js did not load');
      viewer = new window.Cube3dViewer($('viewer'));
      playground.background = viewer.background;
    } catch (e) {
      viewerProblem = `the 3D view is unavailable (${e.message})`;
      showError(viewerProblem);
    }

    const keyInput = $('api-key');
    keyInput.value = sessionStorage.getItem(KEY_STORAGE) || '';
    keyInput.addEventListener('input', () => {
      const key = apiKey();
      if (key) sessionStorage.setItem(KEY_STORAGE, key);
      else sessionStorage.removeItem(KEY_STORAGE);
      clearTimeout(modelTimer);
      modelTimer = setTimeout(loadModel, MODEL_RETRY_MS);
    });

    $('form').addEventListener('submit', (e) => {
      e.preventDefault();
      generate();
    });
    $('form').addEventListener('change', (e) => {
      if (e.target.id === 'format' || e.target.id === 'mesh-profile') selectsChosen = true;
    });
    $('prompt').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        generate();
      }
    });
    $('cancel').addEventListener('click', cancel);
    $('seed-random').addEventListener('click', () => {
      $('seed').value = String(crypto.getRandomValues(new Uint32Array(1))[0]);
    });
    for (const format of Object.keys(FORMATS)) {
      $(`download-${format}`).addEventListener('click', () => download(format));
    }
    $('copy-link').addEventListener('click', copyLink);
    $('history').addEventListener('click', (e) => {
      const button = e.target.closest('button.history-item');
      if (button) showEntry(Number(button.dataset.id));
    });

    const fromLink = fillFromLink();
    if (fromLink) selectsChosen = true;
    const model = loadModel();
    setState(viewer ? 'idle' : 'error');
    playground.ready = true;
    // A shareable link starts at once (after the model's limits are known: the bounding box
    // fields show only for a model that takes one).
    if (fromLink) model.then(generate);
  }

  init();
})();
