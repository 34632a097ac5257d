/*
 * cmd_plan.c — `pipit plan`: compiles the model exactly as `pipit train`
 * would (the same flags) and prints, per rank, its stages, planned peak
 * activation memory, ops and instruction list (or all of it as JSON);
 * nothing runs. `pipit plan --search` is another command
 * (cmd_plan_search.c): it ranks schedules by simulated step time.
 */
#include <stdio.h>

#include "commands.h"
#include "pipit_inspect.h"
#include "train_cli.h"

int cmd_plan(int argc, char **argv) {
    train_args args;
    session s = {.plan_only = 1}; /* nothing runs: no weights, and this machine's memory is not the job's */
    train_args_parse(&args, &s, argc, argv, 1);
    opts *o = &args.o;
    if (o->print_config) {
        print_train_config(&args);
        close_session(&s);
        return 0;
    }
    open_schedule(&s, o);
    open_model(&s, o, &args.c, o->microbatches);
    if (pipit_process_rank() == 0) {
        if (o->json) cli_check(pipit_program_write_plan_json(stdout, s.p), "plan");
        else cli_check(pipit_program_print_plan(stdout, s.p, o->verbose), "plan");
    }
    close_session(&s);
    return 0;
}
