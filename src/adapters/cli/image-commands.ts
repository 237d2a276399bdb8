import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import type { ImageBuildEvent } from '../../domain/events.js';
import type { SvcClient } from '../client/svc-client.js';
import { collect, envOption, print, progress } from './cli-kit.js';
import { readRecipe } from './recipe-file.js';
import { bytes, snapshotList, table } from './format.js';

/** `svc image ls|inspect|build|bake|import|resolve|rm`: guest images (docs/image.md). */
export function imageCommands(program: Command, client: () => SvcClient): void {
  const image = program.command('image').description('guest images');
  image
    .command('ls')
    .option('--json')
    .description('list built images')
    .action(async (o) => {
      const list = await client().listImages();
      print(o.json, list, () =>
        table(
          list.map((i) => [
            i.outdated ? `${i.id} (outdated)` : i.id,
            i.os,
            bytes(i.size_bytes),
            `${i.min_disk_gb} GB`,
            i.min_memory_mb ? `${i.min_memory_mb} MB` : '-',
            i.in_use_by.join(',') || '-',
            snapshotList(i.snapshots),
          ]),
          ['ID', 'OS', 'SIZE', 'MIN DISK', 'MIN MEMORY', 'USED BY', 'SNAPSHOTS'],
        ),
      );
    });
  image
    .command('inspect')
    .argument('<id>')
    .option('--json')
    .description('one image: where it came from, its size, its snapshots and the VMs on it')
    .action(async (id: string, o) => {
      const i = await client().getImage(id);
      print(o.json, i, () =>
        Object.entries({ ...i, snapshots: snapshotList(i.snapshots) })
          .map(([k, v]) => `${k.padEnd(12)} ${Array.isArray(v) ? v.join(', ') : String(v)}`)
          .join('\n'),
      );
    });
  const buildOrBake = async (req: Record<string, unknown>, json: boolean) => {
    let last: ImageBuildEvent | undefined;
    for await (const e of client().buildImageStream(req)) {
      last = e;
      if (!json) progress(e, process.stderr.isTTY === true);
    }
    if (!last || last.phase !== 'ready') throw new Error(last?.error ?? 'the build ended without an answer');
    print(
      json,
      last.image,
      () => `image ${req.name} ${req.from && /^[a-z-]+:/.test(String(req.from)) ? 'imported' : 'built'}`,
    );
  };
  image
    .command('build')
    .argument('<name>')
    .option('-f, --recipe <file>', 'a recipe file (YAML or JSON: from, packages, files, env, run, description)')
    .option('--from <image>', "base image, such as debian (instead of the recipe's)")
    .option('--package <name>', "a Debian package to install (repeat; after the recipe's)", collect, [])
    .option('--run <line>', "a shell line to run, in order (repeat; after the recipe's)", collect, [])
    .option('--file <local:guest[:mode]>', 'copy a local file into the image (repeat)', collect, [])
    .option('--env <KEY=VALUE>', 'an environment variable for /etc/environment (repeat)', collect, [])
    .option('--description <text>')
    .option('--json')
    .description('build an image from a recipe, with live progress')
    .action(async (name: string, o) => {
      const recipe = o.recipe ? readRecipe(o.recipe as string) : undefined;
      const from = (o.from as string | undefined) ?? recipe?.from;
      if (!from) throw new Error('give the base image: --from IMAGE, or from: in a recipe file (-f)');
      const files = (o.file as string[]).map((spec) => {
        const [local, guest, mode] = spec.split(':');
        if (!local || !guest) throw new Error(`--file ${spec}: give LOCAL:GUEST[:MODE]`);
        return { path: guest, content: readFileSync(local).toString('base64'), mode: mode ?? '0644' };
      });
      await buildOrBake(
        {
          name,
          from,
          packages: [...(recipe?.packages ?? []), ...(o.package as string[])],
          run: [...(recipe?.run ?? []), ...(o.run as string[])],
          files: [...(recipe?.files ?? []), ...files],
          env: { ...recipe?.env, ...envOption(o.env as string[]) },
          description: (o.description as string | undefined) ?? recipe?.description,
        },
        !!o.json,
      );
    });
  image
    .command('bake')
    .argument('<name>')
    .argument('<vm>')
    .option('--description <text>')
    .option('--json')
    .description("bake a stopped VM's disk into a new image")
    .action(async (name: string, vm: string, o) =>
      buildOrBake({ name, from_vm: vm, description: o.description }, !!o.json),
    );
  image
    .command('import')
    .argument('<name>')
    .argument(
      '<source>',
      "oci-archive:PATH, docker-archive:PATH or disk:PATH (a file in the daemon's import_dirs), docker://REF (pulled from its registry), or a disk's https:// URL (downloaded)",
    )
    .option('--ssh-user <user>', 'the user the daemon logs in as (disk images; default root)')
    .option('--digest <sha256:HEX|sha512:HEX>', "a URL's disk: its digest, checked after the download")
    .option(
      '--registry-user <user>',
      'docker://: log in to the registry as this user, the password from SVC_REGISTRY_PASSWORD',
    )
    .option('--description <text>')
    .option('--json')
    .description(
      'import a container image (an archive, or pulled from a registry) or a cloud disk as an image, with live progress',
    )
    .action(async (name: string, source: string, o) => {
      if (source.startsWith('docker://')) {
        const registry_auth = registryLogin(o.registryUser);
        await buildOrBake({ name, from: source, registry_auth, description: o.description }, !!o.json);
        return;
      }
      if (o.registryUser) throw new Error('--registry-user belongs to a pull (docker://REF)');
      if (/^https?:\/\//i.test(source)) {
        await buildOrBake(
          { name, from: source, digest: o.digest, ssh_user: o.sshUser, description: o.description },
          !!o.json,
        );
        return;
      }
      if (o.digest) throw new Error("--digest belongs to an import from a disk's URL");
      const m = /^([a-z-]+):(.+)$/s.exec(source);
      if (!m) throw new Error(`${source}: give TYPE:PATH, such as oci-archive:./app.tar, or docker://REF`);
      // The daemon reads the file on its own host: relative paths are the caller's, so made absolute here.
      await buildOrBake(
        { name, from: `${m[1]}:${resolve(m[2])}`, ssh_user: o.sshUser, description: o.description },
        !!o.json,
      );
    });
  image
    .command('resolve')
    .argument('<ref>', 'docker://REF (python:3.12 is docker.io/library/python:3.12)')
    .option('--registry-user <user>', 'log in to the registry as this user, the password from SVC_REGISTRY_PASSWORD')
    .option('--json')
    .description('what a tag in a registry is now: the digest a pull would take, nothing pulled')
    .action(async (ref: string, o) => {
      const from = ref.startsWith('docker://') ? ref : `docker://${ref}`;
      const r = await client().resolveImage(from, registryLogin(o.registryUser));
      print(o.json, r, () => `${r.from} ${r.digest}`);
    });
  image
    .command('rm')
    .argument('<id>')
    .description('delete a built image that no VM uses')
    .action(async (id: string) => console.log((await client().deleteImage(id)).message));
}

/** `--registry-user`'s login, its password from SVC_REGISTRY_PASSWORD (never on a command line). */
function registryLogin(user: string | undefined): { username: string; password: string } | undefined {
  if (!user) return undefined;
  const password = process.env.SVC_REGISTRY_PASSWORD;
  if (!password) throw new Error('--registry-user: set SVC_REGISTRY_PASSWORD to the password');
  return { username: user, password };
}
