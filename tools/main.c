/*
 * main.c — the `pipit` command line: dispatches to one cmd_*.c file per
 * command (commands.h). Each parses its flags from one table (so --help
 * and the errors for unknown flags and bad values come for free) and
 * drives the library through the public headers. The CLI is the only
 * place that calls exit().
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "pipit.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: pipit <command> [flags]\n\n"
            "commands:\n"
            "  train     train a model (GPT-2 or Llama: a preset, your sizes or a checkpoint) on text or token shards\n"
            "  eval      mean loss of a checkpoint on sequential windows of a file (forward only)\n"
            "  sample    generate tokens from a checkpoint (byte-level models print bytes)\n"
            "  schedule  print a pipeline schedule's grid, bubble and peak activations\n"
            "  plan      print the per-rank programs and planned memory (train's model flags; --json: as JSON);\n"
            "            plan --search: rank schedule x V x microbatch size (x tp x dp) by simulated step time\n"
            "  sim       predict step time, TFLOP/s, MFU, bubble and memory of a model on a mesh of GPUs (cost model)\n"
            "  tokenize  text files to token shards, with a byte-level BPE trained on them or loaded\n"
            "  export    a checkpoint as a Hugging Face model folder (model.safetensors, config.json)\n"
            "  plot      loss, validation loss and lr of `train --json` logs against the step, as an SVG\n"
            "  version   print the version and whether MPI is built in (also --version)\n\n"
            "`pipit <command> --help` lists each command's flags.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    int rc = -1;
    if (strcmp(cmd, "plan") == 0)
        for (int i = 2; i < argc; i++)
            if (strcmp(argv[i], "--search") == 0) return cmd_plan_search(argc - 2, argv + 2);
    if (strcmp(cmd, "train") == 0 || strcmp(cmd, "plan") == 0 || strcmp(cmd, "eval") == 0 || strcmp(cmd, "sim") == 0) {
        /* under mpirun each process runs one world rank (sim: --calibrate measures the links between them) */
        if (pipit_init(&argc, &argv)) die("%s", pipit_errmsg());
        if (strcmp(cmd, "eval") == 0) rc = cmd_eval(argc - 2, argv + 2);
        else if (strcmp(cmd, "plan") == 0) rc = cmd_plan(argc - 2, argv + 2);
        else if (strcmp(cmd, "sim") == 0) rc = cmd_sim(argc - 2, argv + 2);
        else rc = cmd_train(argc - 2, argv + 2);
        pipit_finalize();
        return rc;
    }
    if (strcmp(cmd, "schedule") == 0) return cmd_schedule(argc - 2, argv + 2);
    if (strcmp(cmd, "sample") == 0) return cmd_sample(argc - 2, argv + 2);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc - 2, argv + 2);
    if (strcmp(cmd, "export") == 0) return cmd_export(argc - 2, argv + 2);
    if (strcmp(cmd, "plot") == 0) return cmd_plot(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("pipit %s (%s, %s)\n", pipit_version(), pipit_have_mpi() ? "MPI built in" : "no MPI",
               pipit_have_cuda() ? "CUDA built in" : "no CUDA");
        return 0;
    }
    static const char *const cmds[] = {"train", "eval", "sample", "schedule", "plan", "sim", "tokenize",
                                         "export", "plot", "version", "help"};
    fprintf(stderr, "pipit: unknown command '%s'%s\n", cmd, cli_did_you_mean(cmd, cmds, NFLAGS(cmds), ""));
    usage(stderr);
    return 2;
}
