"""Static LIBERO task lists (generated from hf-libero 0.1.4's benchmark; no LIBERO import).

``SUITES[suite]`` lists ``(bddl_name, instruction)`` in LIBERO's task order (task index ``i`` of
the suite is entry ``i``); the BDDL file is ``bddl_files/<suite>/<bddl_name>.bddl`` and the 50
fixed initial states of task ``i`` are ``init_files/<suite>/<bddl_name>.pruned_init``.
``MAX_EPISODE_STEPS`` are the evaluation limits used by the LIBERO / OpenVLA evaluations.
"""

from __future__ import annotations

MAX_EPISODE_STEPS: dict[str, int] = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}

#: LIBERO waits this many no-op steps after setting an initial state so objects settle.
NUM_SETTLE_STEPS = 10

#: Fixed initial states per task in the standard protocol.
NUM_INIT_STATES = 50

SUITES: dict[str, list[tuple[str, str]]] = {
    "libero_spatial": [
        (
            "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate",
            "pick up the black bowl between the plate and the ramekin and place it on the plate",
        ),
        (
            "pick_up_the_black_bowl_next_to_the_ramekin_and_place_it_on_the_plate",
            "pick up the black bowl next to the ramekin and place it on the plate",
        ),
        (
            "pick_up_the_black_bowl_from_table_center_and_place_it_on_the_plate",
            "pick up the black bowl from table center and place it on the plate",
        ),
        (
            "pick_up_the_black_bowl_on_the_cookie_box_and_place_it_on_the_plate",
            "pick up the black bowl on the cookie box and place it on the plate",
        ),
        (
            "pick_up_the_black_bowl_in_the_top_drawer_of_the_wooden_cabinet_and_place_it_on_the_plate",
            "pick up the black bowl in the top drawer of the wooden cabinet and place it on the plate",
        ),
        (
            "pick_up_the_black_bowl_on_the_ramekin_and_place_it_on_the_plate",
            "pick up the black bowl on the ramekin and place it on the plate",
        ),
        (
            "pick_up_the_black_bowl_next_to_the_cookie_box_and_place_it_on_the_plate",
            "pick up the black bowl next to the cookie box and place it on the plate",
        ),
        (
            "pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate",
            "pick up the black bowl on the stove and place it on the plate",
        ),
        (
            "pick_up_the_black_bowl_next_to_the_plate_and_place_it_on_the_plate",
            "pick up the black bowl next to the plate and place it on the plate",
        ),
        (
            "pick_up_the_black_bowl_on_the_wooden_cabinet_and_place_it_on_the_plate",
            "pick up the black bowl on the wooden cabinet and place it on the plate",
        ),
    ],
    "libero_object": [
        (
            "pick_up_the_alphabet_soup_and_place_it_in_the_basket",
            "pick up the alphabet soup and place it in the basket",
        ),
        (
            "pick_up_the_cream_cheese_and_place_it_in_the_basket",
            "pick up the cream cheese and place it in the basket",
        ),
        (
            "pick_up_the_salad_dressing_and_place_it_in_the_basket",
            "pick up the salad dressing and place it in the basket",
        ),
        (
            "pick_up_the_bbq_sauce_and_place_it_in_the_basket",
            "pick up the bbq sauce and place it in the basket",
        ),
        (
            "pick_up_the_ketchup_and_place_it_in_the_basket",
            "pick up the ketchup and place it in the basket",
        ),
        (
            "pick_up_the_tomato_sauce_and_place_it_in_the_basket",
            "pick up the tomato sauce and place it in the basket",
        ),
        (
            "pick_up_the_butter_and_place_it_in_the_basket",
            "pick up the butter and place it in the basket",
        ),
        (
            "pick_up_the_milk_and_place_it_in_the_basket",
            "pick up the milk and place it in the basket",
        ),
        (
            "pick_up_the_chocolate_pudding_and_place_it_in_the_basket",
            "pick up the chocolate pudding and place it in the basket",
        ),
        (
            "pick_up_the_orange_juice_and_place_it_in_the_basket",
            "pick up the orange juice and place it in the basket",
        ),
    ],
    "libero_goal": [
        (
            "open_the_middle_drawer_of_the_cabinet",
            "open the middle drawer of the cabinet",
        ),
        (
            "put_the_bowl_on_the_stove",
            "put the bowl on the stove",
        ),
        (
            "put_the_wine_bottle_on_top_of_the_cabinet",
            "put the wine bottle on top of the cabinet",
        ),
        (
            "open_the_top_drawer_and_put_the_bowl_inside",
            "open the top drawer and put the bowl inside",
        ),
        (
            "put_the_bowl_on_top_of_the_cabinet",
            "put the bowl on top of the cabinet",
        ),
        (
            "push_the_plate_to_the_front_of_the_stove",
            "push the plate to the front of the stove",
        ),
        (
            "put_the_cream_cheese_in_the_bowl",
            "put the cream cheese in the bowl",
        ),
        (
            "turn_on_the_stove",
            "turn on the stove",
        ),
        (
            "put_the_bowl_on_the_plate",
            "put the bowl on the plate",
        ),
        (
            "put_the_wine_bottle_on_the_rack",
            "put the wine bottle on the rack",
        ),
    ],
    "libero_10": [
        (
            "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket",
            "put both the alphabet soup and the tomato sauce in the basket",
        ),
        (
            "LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket",
            "put both the cream cheese box and the butter in the basket",
        ),
        (
            "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it",
            "turn on the stove and put the moka pot on it",
        ),
        (
            "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet_and_close_it",
            "put the black bowl in the bottom drawer of the cabinet and close it",
        ),
        (
            "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_white_mug_on_the_right_plate",
            "put the white mug on the left plate and put the yellow and white mug on the right plate",
        ),
        (
            "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy",
            "pick up the book and place it in the back compartment of the caddy",
        ),
        (
            "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate_and_put_the_chocolate_pudding_to_the_right_of_the_plate",
            "put the white mug on the plate and put the chocolate pudding to the right of the plate",
        ),
        (
            "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_basket",
            "put both the alphabet soup and the cream cheese box in the basket",
        ),
        (
            "KITCHEN_SCENE8_put_both_moka_pots_on_the_stove",
            "put both moka pots on the stove",
        ),
        (
            "KITCHEN_SCENE6_put_the_yellow_and_white_mug_in_the_microwave_and_close_it",
            "put the yellow and white mug in the microwave and close it",
        ),
    ],
    "libero_90": [
        (
            "KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet",
            "close the top drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet_and_put_the_black_bowl_on_top_of_it",
            "close the top drawer of the cabinet and put the black bowl on top of it",
        ),
        (
            "KITCHEN_SCENE10_put_the_black_bowl_in_the_top_drawer_of_the_cabinet",
            "put the black bowl in the top drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE10_put_the_butter_at_the_back_in_the_top_drawer_of_the_cabinet_and_close_it",
            "put the butter at the back in the top drawer of the cabinet and close it",
        ),
        (
            "KITCHEN_SCENE10_put_the_butter_at_the_front_in_the_top_drawer_of_the_cabinet_and_close_it",
            "put the butter at the front in the top drawer of the cabinet and close it",
        ),
        (
            "KITCHEN_SCENE10_put_the_chocolate_pudding_in_the_top_drawer_of_the_cabinet_and_close_it",
            "put the chocolate pudding in the top drawer of the cabinet and close it",
        ),
        (
            "KITCHEN_SCENE1_open_the_bottom_drawer_of_the_cabinet",
            "open the bottom drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE1_open_the_top_drawer_of_the_cabinet",
            "open the top drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE1_open_the_top_drawer_of_the_cabinet_and_put_the_bowl_in_it",
            "open the top drawer of the cabinet and put the bowl in it",
        ),
        (
            "KITCHEN_SCENE1_put_the_black_bowl_on_the_plate",
            "put the black bowl on the plate",
        ),
        (
            "KITCHEN_SCENE1_put_the_black_bowl_on_top_of_the_cabinet",
            "put the black bowl on top of the cabinet",
        ),
        (
            "KITCHEN_SCENE2_open_the_top_drawer_of_the_cabinet",
            "open the top drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE2_put_the_black_bowl_at_the_back_on_the_plate",
            "put the black bowl at the back on the plate",
        ),
        (
            "KITCHEN_SCENE2_put_the_black_bowl_at_the_front_on_the_plate",
            "put the black bowl at the front on the plate",
        ),
        (
            "KITCHEN_SCENE2_put_the_middle_black_bowl_on_the_plate",
            "put the middle black bowl on the plate",
        ),
        (
            "KITCHEN_SCENE2_put_the_middle_black_bowl_on_top_of_the_cabinet",
            "put the middle black bowl on top of the cabinet",
        ),
        (
            "KITCHEN_SCENE2_stack_the_black_bowl_at_the_front_on_the_black_bowl_in_the_middle",
            "stack the black bowl at the front on the black bowl in the middle",
        ),
        (
            "KITCHEN_SCENE2_stack_the_middle_black_bowl_on_the_back_black_bowl",
            "stack the middle black bowl on the back black bowl",
        ),
        (
            "KITCHEN_SCENE3_put_the_frying_pan_on_the_stove",
            "put the frying pan on the stove",
        ),
        (
            "KITCHEN_SCENE3_put_the_moka_pot_on_the_stove",
            "put the moka pot on the stove",
        ),
        (
            "KITCHEN_SCENE3_turn_on_the_stove",
            "turn on the stove",
        ),
        (
            "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_frying_pan_on_it",
            "turn on the stove and put the frying pan on it",
        ),
        (
            "KITCHEN_SCENE4_close_the_bottom_drawer_of_the_cabinet",
            "close the bottom drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE4_close_the_bottom_drawer_of_the_cabinet_and_open_the_top_drawer",
            "close the bottom drawer of the cabinet and open the top drawer",
        ),
        (
            "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet",
            "put the black bowl in the bottom drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE4_put_the_black_bowl_on_top_of_the_cabinet",
            "put the black bowl on top of the cabinet",
        ),
        (
            "KITCHEN_SCENE4_put_the_wine_bottle_in_the_bottom_drawer_of_the_cabinet",
            "put the wine bottle in the bottom drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE4_put_the_wine_bottle_on_the_wine_rack",
            "put the wine bottle on the wine rack",
        ),
        (
            "KITCHEN_SCENE5_close_the_top_drawer_of_the_cabinet",
            "close the top drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE5_put_the_black_bowl_in_the_top_drawer_of_the_cabinet",
            "put the black bowl in the top drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE5_put_the_black_bowl_on_the_plate",
            "put the black bowl on the plate",
        ),
        (
            "KITCHEN_SCENE5_put_the_black_bowl_on_top_of_the_cabinet",
            "put the black bowl on top of the cabinet",
        ),
        (
            "KITCHEN_SCENE5_put_the_ketchup_in_the_top_drawer_of_the_cabinet",
            "put the ketchup in the top drawer of the cabinet",
        ),
        (
            "KITCHEN_SCENE6_close_the_microwave",
            "close the microwave",
        ),
        (
            "KITCHEN_SCENE6_put_the_yellow_and_white_mug_to_the_front_of_the_white_mug",
            "put the yellow and white mug to the front of the white mug",
        ),
        (
            "KITCHEN_SCENE7_open_the_microwave",
            "open the microwave",
        ),
        (
            "KITCHEN_SCENE7_put_the_white_bowl_on_the_plate",
            "put the white bowl on the plate",
        ),
        (
            "KITCHEN_SCENE7_put_the_white_bowl_to_the_right_of_the_plate",
            "put the white bowl to the right of the plate",
        ),
        (
            "KITCHEN_SCENE8_put_the_right_moka_pot_on_the_stove",
            "put the right moka pot on the stove",
        ),
        (
            "KITCHEN_SCENE8_turn_off_the_stove",
            "turn off the stove",
        ),
        (
            "KITCHEN_SCENE9_put_the_frying_pan_on_the_cabinet_shelf",
            "put the frying pan on the cabinet shelf",
        ),
        (
            "KITCHEN_SCENE9_put_the_frying_pan_on_top_of_the_cabinet",
            "put the frying pan on top of the cabinet",
        ),
        (
            "KITCHEN_SCENE9_put_the_frying_pan_under_the_cabinet_shelf",
            "put the frying pan under the cabinet shelf",
        ),
        (
            "KITCHEN_SCENE9_put_the_white_bowl_on_top_of_the_cabinet",
            "put the white bowl on top of the cabinet",
        ),
        (
            "KITCHEN_SCENE9_turn_on_the_stove",
            "turn on the stove",
        ),
        (
            "KITCHEN_SCENE9_turn_on_the_stove_and_put_the_frying_pan_on_it",
            "turn on the stove and put the frying pan on it",
        ),
        (
            "LIVING_ROOM_SCENE1_pick_up_the_alphabet_soup_and_put_it_in_the_basket",
            "pick up the alphabet soup and put it in the basket",
        ),
        (
            "LIVING_ROOM_SCENE1_pick_up_the_cream_cheese_box_and_put_it_in_the_basket",
            "pick up the cream cheese box and put it in the basket",
        ),
        (
            "LIVING_ROOM_SCENE1_pick_up_the_ketchup_and_put_it_in_the_basket",
            "pick up the ketchup and put it in the basket",
        ),
        (
            "LIVING_ROOM_SCENE1_pick_up_the_tomato_sauce_and_put_it_in_the_basket",
            "pick up the tomato sauce and put it in the basket",
        ),
        (
            "LIVING_ROOM_SCENE2_pick_up_the_alphabet_soup_and_put_it_in_the_basket",
            "pick up the alphabet soup and put it in the basket",
        ),
        (
            "LIVING_ROOM_SCENE2_pick_up_the_butter_and_put_it_in_the_basket",
            "pick up the butter and put it in the basket",
        ),
        (
            "LIVING_ROOM_SCENE2_pick_up_the_milk_and_put_it_in_the_basket",
            "pick up the milk and put it in the basket",
        ),
        (
            "LIVING_ROOM_SCENE2_pick_up_the_orange_juice_and_put_it_in_the_basket",
            "pick up the orange juice and put it in the basket",
        ),
        (
            "LIVING_ROOM_SCENE2_pick_up_the_tomato_sauce_and_put_it_in_the_basket",
            "pick up the tomato sauce and put it in the basket",
        ),
        (
            "LIVING_ROOM_SCENE3_pick_up_the_alphabet_soup_and_put_it_in_the_tray",
            "pick up the alphabet soup and put it in the tray",
        ),
        (
            "LIVING_ROOM_SCENE3_pick_up_the_butter_and_put_it_in_the_tray",
            "pick up the butter and put it in the tray",
        ),
        (
            "LIVING_ROOM_SCENE3_pick_up_the_cream_cheese_and_put_it_in_the_tray",
            "pick up the cream cheese and put it in the tray",
        ),
        (
            "LIVING_ROOM_SCENE3_pick_up_the_ketchup_and_put_it_in_the_tray",
            "pick up the ketchup and put it in the tray",
        ),
        (
            "LIVING_ROOM_SCENE3_pick_up_the_tomato_sauce_and_put_it_in_the_tray",
            "pick up the tomato sauce and put it in the tray",
        ),
        (
            "LIVING_ROOM_SCENE4_pick_up_the_black_bowl_on_the_left_and_put_it_in_the_tray",
            "pick up the black bowl on the left and put it in the tray",
        ),
        (
            "LIVING_ROOM_SCENE4_pick_up_the_chocolate_pudding_and_put_it_in_the_tray",
            "pick up the chocolate pudding and put it in the tray",
        ),
        (
            "LIVING_ROOM_SCENE4_pick_up_the_salad_dressing_and_put_it_in_the_tray",
            "pick up the salad dressing and put it in the tray",
        ),
        (
            "LIVING_ROOM_SCENE4_stack_the_left_bowl_on_the_right_bowl_and_place_them_in_the_tray",
            "stack the left bowl on the right bowl and place them in the tray",
        ),
        (
            "LIVING_ROOM_SCENE4_stack_the_right_bowl_on_the_left_bowl_and_place_them_in_the_tray",
            "stack the right bowl on the left bowl and place them in the tray",
        ),
        (
            "LIVING_ROOM_SCENE5_put_the_red_mug_on_the_left_plate",
            "put the red mug on the left plate",
        ),
        (
            "LIVING_ROOM_SCENE5_put_the_red_mug_on_the_right_plate",
            "put the red mug on the right plate",
        ),
        (
            "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate",
            "put the white mug on the left plate",
        ),
        (
            "LIVING_ROOM_SCENE5_put_the_yellow_and_white_mug_on_the_right_plate",
            "put the yellow and white mug on the right plate",
        ),
        (
            "LIVING_ROOM_SCENE6_put_the_chocolate_pudding_to_the_left_of_the_plate",
            "put the chocolate pudding to the left of the plate",
        ),
        (
            "LIVING_ROOM_SCENE6_put_the_chocolate_pudding_to_the_right_of_the_plate",
            "put the chocolate pudding to the right of the plate",
        ),
        (
            "LIVING_ROOM_SCENE6_put_the_red_mug_on_the_plate",
            "put the red mug on the plate",
        ),
        (
            "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate",
            "put the white mug on the plate",
        ),
        (
            "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_front_compartment_of_the_caddy",
            "pick up the book and place it in the front compartment of the caddy",
        ),
        (
            "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_left_compartment_of_the_caddy",
            "pick up the book and place it in the left compartment of the caddy",
        ),
        (
            "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_right_compartment_of_the_caddy",
            "pick up the book and place it in the right compartment of the caddy",
        ),
        (
            "STUDY_SCENE1_pick_up_the_yellow_and_white_mug_and_place_it_to_the_right_of_the_caddy",
            "pick up the yellow and white mug and place it to the right of the caddy",
        ),
        (
            "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy",
            "pick up the book and place it in the back compartment of the caddy",
        ),
        (
            "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_front_compartment_of_the_caddy",
            "pick up the book and place it in the front compartment of the caddy",
        ),
        (
            "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_left_compartment_of_the_caddy",
            "pick up the book and place it in the left compartment of the caddy",
        ),
        (
            "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_right_compartment_of_the_caddy",
            "pick up the book and place it in the right compartment of the caddy",
        ),
        (
            "STUDY_SCENE3_pick_up_the_book_and_place_it_in_the_front_compartment_of_the_caddy",
            "pick up the book and place it in the front compartment of the caddy",
        ),
        (
            "STUDY_SCENE3_pick_up_the_book_and_place_it_in_the_left_compartment_of_the_caddy",
            "pick up the book and place it in the left compartment of the caddy",
        ),
        (
            "STUDY_SCENE3_pick_up_the_book_and_place_it_in_the_right_compartment_of_the_caddy",
            "pick up the book and place it in the right compartment of the caddy",
        ),
        (
            "STUDY_SCENE3_pick_up_the_red_mug_and_place_it_to_the_right_of_the_caddy",
            "pick up the red mug and place it to the right of the caddy",
        ),
        (
            "STUDY_SCENE3_pick_up_the_white_mug_and_place_it_to_the_right_of_the_caddy",
            "pick up the white mug and place it to the right of the caddy",
        ),
        (
            "STUDY_SCENE4_pick_up_the_book_in_the_middle_and_place_it_on_the_cabinet_shelf",
            "pick up the book in the middle and place it on the cabinet shelf",
        ),
        (
            "STUDY_SCENE4_pick_up_the_book_on_the_left_and_place_it_on_top_of_the_shelf",
            "pick up the book on the left and place it on top of the shelf",
        ),
        (
            "STUDY_SCENE4_pick_up_the_book_on_the_right_and_place_it_on_the_cabinet_shelf",
            "pick up the book on the right and place it on the cabinet shelf",
        ),
        (
            "STUDY_SCENE4_pick_up_the_book_on_the_right_and_place_it_under_the_cabinet_shelf",
            "pick up the book on the right and place it under the cabinet shelf",
        ),
    ],
}
