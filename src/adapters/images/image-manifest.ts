import type { OciImageConfig } from './oci-layout.js';

/** `images_dir/<id>/manifest.json` as image/build-image.sh writes it. */
export interface ImageManifest {
  id: string;
  format: number;
  os?: string;
  description?: string;
  kernel: string;
  initrd: string;
  disk: string;
  disk_gb: number;
  cmdline: string;
  ssh_user: string;
  agent_ready: boolean;
  boot?: 'kernel' | 'firmware';
  source?: string;
  agent_version?: string;
  /** What a built-in image was built from (image-builds.ts, builtinInputs); none before 2026-12-05. */
  inputs_digest?: string;
  /** The least memory it boots in (DEFAULT_MIN_MEMORY_MB, or its base image's, when not said). */
  min_memory_mb?: number;
  /** A container image's config (images imported from one, and those baked from their VMs). */
  image_config?: OciImageConfig;
  /**
   * Its init hands the entrypoint to the agent (images imported since 2026-12-03, and those baked
   * from their VMs); an older one's does not, so none is shown or sent.
   */
  runs_entrypoint?: boolean;
}
