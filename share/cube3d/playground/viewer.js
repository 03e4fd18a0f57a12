// The playground's 3D view: three.js r111 (Debian's libjs-three, UMD builds: the global THREE
// with its loaders and OrbitControls attached), rendering on demand only (after a load, an orbit
// or a resize) so that an idle tab costs nothing: on a CPU-only host the software renderer would
// otherwise compete with the server for the same cores.
'use strict';

(() => {
  // The renderer's clear colour; the browser test reads it (window.cube3dPlayground.background)
  // to count the pixels that the mesh covers.
  const BACKGROUND = '#1b212b';
  const MESH_COLOUR = 0xc2b6a3;
  // From where the camera first looks at a mesh: front right, a little above.
  const VIEW_DIRECTION = [0.85, 0.55, 1.25];
  const FOV_DEG = 40;

  class Viewer {
    constructor(canvas) {
      if (typeof THREE === 'undefined' || !THREE.GLTFLoader || !THREE.OBJLoader ||
          !THREE.PLYLoader || !THREE.OrbitControls) {
        throw new Error('three.js did not load (/vendor/three/)');
      }
      this.canvas = canvas;
      this.background = BACKGROUND;
      // preserveDrawingBuffer: the drawing stays readable after compositing, for thumbnails
      // (toDataURL) and screenshots.
      this.renderer = new THREE.WebGLRenderer({canvas, antialias: true,
                                               preserveDrawingBuffer: true});
      this.renderer.setClearColor(new THREE.Color(BACKGROUND), 1);
      // Colours in sRGB: r111 spells it gammaOutput; later releases outputEncoding.
      if ('outputEncoding' in this.renderer) {
        this.renderer.outputEncoding = THREE.sRGBEncoding;
      } else {
        this.renderer.gammaOutput = true;
        this.renderer.gammaFactor = 2.2;
      }

      this.scene = new THREE.Scene();
      this.camera = new THREE.PerspectiveCamera(FOV_DEG, 1, 0.01, 100);
      this.camera.position.set(...VIEW_DIRECTION).normalize().multiplyScalar(4);

      // A sky/ground hemisphere so every side reads, a key light that follows the camera (the
      // side one looks at is always lit, with shading that shows the form) and a dim rim light.
      this.scene.add(new THREE.HemisphereLight(0xdce6ff, 0x2b241e, 0.7));
      this.key = new THREE.DirectionalLight(0xfff4e8, 0.9);
      this.scene.add(this.key);
      this.scene.add(this.key.target);
      const rim = new THREE.DirectionalLight(0x8fb0ff, 0.45);
      rim.position.set(-2, 1.5, -3);
      this.scene.add(rim);

      this.controls = new THREE.OrbitControls(this.camera, canvas);
      this.controls.enableDamping = false;  // damping needs a render loop; we render on demand
      this.controls.addEventListener('change', () => this.requestRender());

      this.object = null;
      this.pending = false;
      this.resize();
      // The canvas follows its box (CSS decides the layout); the drawing buffer follows it.
      new ResizeObserver(() => this.resize()).observe(canvas);
    }

    resize() {
      const width = Math.max(1, Math.round(this.canvas.clientWidth));
      const height = Math.max(1, Math.round(this.canvas.clientHeight));
      this.renderer.setPixelRatio(Math.min(window.devicePixelRatio || 1, 2));
      this.renderer.setSize(width, height, false);  // false: leave the canvas's CSS size alone
      this.camera.aspect = width / height;
      this.camera.updateProjectionMatrix();
      this.render();
    }

    requestRender() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => {
        this.pending = false;
        this.render();
      });
    }

    render() {
      // The key light sits above and to the right of the camera, aimed at what it orbits.
      const offset = new THREE.Vector3(1, 1.2, 0).applyQuaternion(this.camera.quaternion);
      this.key.position.copy(this.camera.position).add(offset);
      this.key.target.position.copy(this.controls.target);
      this.key.target.updateMatrixWorld();
      this.renderer.render(this.scene, this.camera);
    }

    // Shows a mesh file (format 'glb' | 'obj' | 'ply', bytes a Uint8Array); resolves to the
    // counts of what it shows: {faces, vertices}.
    async show(format, bytes) {
      const object = await parse(format, bytes);
      // The colour is given in sRGB; lighting works in linear space (gamma on output).
      const material = new THREE.MeshStandardMaterial({
        color: new THREE.Color(MESH_COLOUR).convertSRGBToLinear(), roughness: 0.55,
        metalness: 0.05, side: THREE.DoubleSide});
      let faces = 0;
      let vertices = 0;
      object.traverse((node) => {
        if (!node.isMesh) return;
        const geometry = node.geometry;
        // PLY and some OBJ files come without normals: shading needs them.
        if (!geometry.getAttribute('normal')) geometry.computeVertexNormals();
        node.material = material;
        const positions = geometry.getAttribute('position');
        vertices += positions ? positions.count : 0;
        faces += geometry.index ? geometry.index.count / 3 : (positions ? positions.count / 3 : 0);
      });
      this.clear();
      this.object = object;
      this.scene.add(object);
      this.frame(object);
      return {faces, vertices};
    }

    clear() {
      if (!this.object) return;
      this.scene.remove(this.object);
      this.object.traverse((node) => {
        if (node.isMesh) {
          node.geometry.dispose();
          node.material.dispose();
        }
      });
      this.object = null;
      this.render();
    }

    // Points the camera at the object's bounding sphere from VIEW_DIRECTION, at the distance
    // where the sphere fits the narrower of the two fields of view.
    frame(object) {
      const box = new THREE.Box3().setFromObject(object);
      if (box.isEmpty()) {
        this.render();
        return;
      }
      const sphere = box.getBoundingSphere(new THREE.Sphere());
      const radius = Math.max(sphere.radius, 1e-3);
      const vertical = this.camera.fov * Math.PI / 180;
      const horizontal = 2 * Math.atan(Math.tan(vertical / 2) * this.camera.aspect);
      const distance = radius / Math.sin(Math.min(vertical, horizontal) / 2) * 1.08;
      const direction = new THREE.Vector3(...VIEW_DIRECTION).normalize();
      this.camera.position.copy(sphere.center).addScaledVector(direction, distance);
      this.camera.near = distance / 100;
      this.camera.far = distance * 100;
      this.camera.updateProjectionMatrix();
      this.controls.target.copy(sphere.center);
      this.controls.minDistance = radius * 0.2;
      this.controls.maxDistance = distance * 10;
      this.controls.update();  // fires 'change' (a render on the next frame)
      this.render();           // and one now, so that a thumbnail taken next sees the mesh
    }

    // A PNG data URL of the view, cropped to width:height and scaled down to that size.
    thumbnail(width, height) {
      this.render();
      const source = this.renderer.domElement;
      const scale = Math.min(source.width / width, source.height / height);
      const cropWidth = width * scale;
      const cropHeight = height * scale;
      const canvas = document.createElement('canvas');
      canvas.width = width;
      canvas.height = height;
      canvas.getContext('2d').drawImage(source, (source.width - cropWidth) / 2,
                                        (source.height - cropHeight) / 2, cropWidth, cropHeight,
                                        0, 0, width, height);
      return canvas.toDataURL('image/png');
    }
  }

  function parse(format, bytes) {
    // The loaders want an ArrayBuffer of exactly the file (a view's buffer may be larger).
    const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    switch (format) {
      case 'glb':
        return new Promise((resolve, reject) => {
          new THREE.GLTFLoader().parse(buffer, '', (gltf) => resolve(gltf.scene),
                                       (error) => reject(new Error(`GLB: ${error.message ||
                                                                        error}`)));
        });
      case 'obj':
        return Promise.resolve(new THREE.OBJLoader().parse(new TextDecoder().decode(bytes)));
      case 'ply': {
        const geometry = new THREE.PLYLoader().parse(buffer);
        return Promise.resolve(new THREE.Mesh(geometry));
      }
      default:
        return Promise.reject(new Error(`no viewer for the format ${format}`));
    }
  }

  window.Cube3dViewer = Viewer;
})();
